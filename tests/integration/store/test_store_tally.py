"""The tally (db/tally.py): nsjq status's counts from the backlog, the folded counts and the
attempts since the last fold agree with a read of the whole table, whatever happened
between folds: attempts that ended after their id was folded, attempts enqueued since,
hours the purge emptied."""

from __future__ import annotations

from nsj_queue_lib.db.inspection import RECENT_SECONDS, summary_row
from tests.integration.store.backends import (
    MYSQL,
    MYSQL_PARTITIONED,
    PARTITIONED,
    POSTGRES,
    ago,
    fetch,
    on,
)

pytestmark = on(POSTGRES, PARTITIONED, MYSQL, MYSQL_PARTITIONED)


def _status(backend, name: str) -> dict[tuple, tuple]:
    inspection = backend.driver.inspection_store()
    if name == "summary_tallied":
        # What nsjq status runs (on the partitioned layout, bounded to recent days).
        assert inspection.tallied(backend.admin)
        rows = inspection.summary(backend.admin)
    else:
        rows = inspection._fetch(backend.admin, name, {"recent_seconds": RECENT_SECONDS})
    return {
        (r["processo"], r["status"]): (r["tasks"], r["failed_24h"], r["dead_24h"])
        for r in map(summary_row, rows)  # (summary's rows are converted already: idempotent)
    }


def _agrees(backend) -> dict[tuple, tuple]:
    scanned = _status(backend, "summary")
    assert _status(backend, "summary_tallied") == scanned
    return scanned


def _fold(backend) -> None:
    conn = backend._keep(backend.driver.connect(autocommit=False))
    result = backend.store.fold_counts(conn, 60)
    conn.commit()
    assert result is not None


def fetch_rows(backend, sql: str) -> list[tuple]:
    return [tuple(row.values()) for row in fetch(backend.admin, sql)]


def _tally_rows(backend) -> int:
    return backend.value(f"SELECT count(*) FROM {backend.table}_tally")


def _mark(backend, status: str, ids: list[int], **extra: object) -> None:
    sets = ", ".join(f"{name} = %s" for name in extra)
    backend.execute(
        f"UPDATE {backend.table} SET status = %s{', ' + sets if sets else ''} "
        f"WHERE id IN ({', '.join(str(int(i)) for i in ids)})",
        (status, *extra.values()),
    )


def test_folded_counts_agree_with_a_read_of_the_whole_table(backend):
    ids = backend.enqueue(*[dict(processo=f"p{n % 2}") for n in range(30)])
    _mark(backend, "sucesso", ids[:12])
    _mark(backend, "falha", ids[12:16])
    _mark(backend, "cancelada", ids[16:18], dead=True)
    _mark(backend, "processando", ids[18:20])
    # Nothing folded yet: the counts read the table itself.
    before = _agrees(backend)
    assert before[("p0", "sucesso")][0] + before[("p1", "sucesso")][0] == 12
    _fold(backend)  # sees the highest id
    _fold(backend)  # folds up to it
    assert _tally_rows(backend) > 0
    assert backend.value(f"SELECT folded_to FROM {backend.table}_tally_state") == max(ids)
    assert _agrees(backend) == before

    # Between folds: open attempts end, new ones come, some of them end too.
    _mark(backend, "sucesso", ids[20:25])
    _mark(backend, "falha", ids[18:19])
    later = backend.enqueue(*[dict(processo="p2") for _ in range(6)])
    _mark(backend, "sucesso", later[:4])
    after = _agrees(backend)
    assert after[("p2", "sucesso")] == (4, 0, 0)
    _fold(backend)
    _fold(backend)
    assert _agrees(backend) == after
    # The open attempts that ended were folded once and left the open table.
    open_ids = backend.value(f"SELECT count(*) FROM {backend.table}_tally_open")
    assert open_ids == backend.count(
        f"id <= {int(max(later))} AND status IN ('pendente', 'agendada', 'processando')"
    )


@on(POSTGRES, MYSQL)
def test_hours_past_the_purge_age_leave_the_tally(backend, store):
    ids = backend.enqueue(*[{} for _ in range(8)])
    _mark(backend, "sucesso", ids)
    backend.execute(
        f"UPDATE {backend.table} SET data_hora = data_hora - INTERVAL '70' DAY "
        f"WHERE id IN ({', '.join(str(i) for i in ids[:5])})"
        if backend.dialect == "mysql"
        else f"UPDATE {backend.table} SET data_hora = data_hora - interval '70 days' "
        f"WHERE id = ANY(%s)",
        None if backend.dialect == "mysql" else (ids[:5],),
    )
    _fold(backend)
    _fold(backend)
    # The tally leaves out the hours past QUEUE_PURGE_MAX_AGE, which the purge empties.
    assert _status(backend, "summary_tallied")[("emitir_nota", "sucesso")][0] == 3
    assert _status(backend, "summary")[("emitir_nota", "sucesso")][0] == 8
    conn = backend.worker()
    assert store.purge_round(conn, 60, 1000) == 5
    assert _agrees(backend)[("emitir_nota", "sucesso")][0] == 3


def test_hours_older_than_two_days_are_merged_into_their_day(backend):
    old = backend.enqueue(*[dict(data_hora=ago(5 * 86400 + k * 3600)) for k in range(6)])
    recent = backend.enqueue(*[dict(data_hora=ago(k * 3600)) for k in range(3)])
    _mark(backend, "sucesso", [*old, *recent])
    before = _agrees(backend)
    _fold(backend)
    _fold(backend)
    assert _agrees(backend) == before
    hours = [
        int(h)
        for (h,) in fetch_rows(backend, f"SELECT hour FROM {backend.table}_tally ORDER BY hour")
    ]
    now_hour = int(backend.now().timestamp()) // 3600
    assert all(h % 24 == 0 for h in hours if h < now_hour - 48)
    assert len([h for h in hours if h >= now_hour - 48]) == 3  # the last ones stay by hour
    assert len(hours) <= 5  # six old hours in one or two days


def test_tasks_waiting_for_their_parents_are_unfinished_for_the_tally(backend):
    parent = backend.enqueue()
    child = backend.enqueue(after=[parent])
    _fold(backend)
    _fold(backend)
    waiting = _agrees(backend)
    assert waiting[("emitir_nota", "aguardando")][0] == 1
    assert backend.value(f"SELECT count(*) FROM {backend.table}_tally_open") == 2
    _mark(backend, "cancelada", [child])  # ends it: folded once, as finished
    _fold(backend)
    assert ("emitir_nota", "aguardando") not in _agrees(backend)
