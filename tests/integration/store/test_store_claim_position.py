"""The claim function's position (PostgreSQL, claim_function.sql): where ready tasks began
at the session's last look-up, from which its claims walk the claim index while the
look-up is recent.

Under a snapshot held elsewhere the entries of claimed tasks stay in the claim index, and
a walk from the index's start walks all of them; from the position it walks a few. The
price is a claim order that lags by the position's life: a task that becomes ready ahead
of it waits for the next look-up, which comes at once when nothing is ready after it.
"""

from __future__ import annotations

import statistics

import pytest

from tests.integration.store.backends import POSTGRES, on

pytestmark = on(POSTGRES)

FAR_FUTURE_US = 4_000_000_000 * 1_000_000  # in the year 2096: never expires in a test


def claim(backend, worker, limit: int = 1) -> list[int]:
    rows = backend.store.claim_call(worker, None, None, limit, b"COMMIT", begin=True)
    return [row["id"] for row in rows]


def remember(backend, worker, prioridade: int, task_id: int, until_us: int = FAR_FUTURE_US):
    """Set the session's position at ``task_id`` (as a look-up would have)."""
    data_hora_us = backend.value(
        f"SELECT (extract(epoch FROM data_hora) * 1000000)::bigint FROM {backend.table} "
        "WHERE id = %s",
        (task_id,),
    )
    value = f"{backend.store.queue_key},{until_us},{prioridade},{data_hora_us},{task_id}"
    worker.execute("SELECT set_config('nsjq.claim_position', %s, false)", (value,))


def position(worker) -> list[str]:
    found = worker.execute("SELECT current_setting('nsjq.claim_position', true)").fetchone()[0]
    return [] if not found else found.split(",")


def test_a_look_up_remembers_where_ready_tasks_began_for_a_moment(backend):
    first, second, _ = backend.enqueue({}, {}, {})
    worker = backend.worker()
    assert claim(backend, worker) == [first]
    queue_key, fresh_us, prioridade, _, task_id, kind, until_us = position(worker)
    assert queue_key == str(backend.store.queue_key) and prioridade == "50"
    assert int(task_id) == first and kind == "ready"  # the first ready task at the look-up
    now_us = backend.value("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
    assert 0 < int(fresh_us) - now_us <= 2_000_000  # fresh: 20 ms at least, 2 s at most
    assert int(fresh_us) <= int(until_us) <= now_us + 5_000_000  # then used up to 5 s
    assert claim(backend, worker) == [second]


def test_claim_order_lags_by_the_position_and_nothing_after_it_looks_up_at_once(backend):
    low = backend.enqueue({"prioridade": 10}, {"prioridade": 10})
    worker = backend.worker()
    remember(backend, worker, 10, low[0])
    high = backend.enqueue(prioridade=90)
    # Ahead of the position: it waits while the position lives.
    assert claim(backend, worker) == [low[0]]
    assert claim(backend, worker) == [low[1]]
    # Nothing after the position: the look-up finds it at once.
    assert claim(backend, worker) == [high]
    # An expired position is not used.
    again = backend.enqueue({"prioridade": 10}, {"prioridade": 90})
    remember(backend, worker, 10, again[0], until_us=1)
    assert claim(backend, worker) == [again[1]]


def test_past_its_fresh_life_a_position_serves_what_is_after_it_until_its_end(backend):
    low = backend.enqueue({"prioridade": 10}, {"prioridade": 10})
    worker = backend.worker()
    data_hora_us = backend.value(
        f"SELECT (extract(epoch FROM data_hora) * 1000000)::bigint FROM {backend.table} "
        "WHERE id = %s",
        (low[0],),
    )
    # Fresh no more (its second field), not ended (its last): a look-up is due, and comes
    # when nothing is after it, not in front of the tasks that are.
    value = f"{backend.store.queue_key},1,10,{data_hora_us},{low[0]},ready,{FAR_FUTURE_US}"
    worker.execute("SELECT set_config('nsjq.claim_position', %s, false)", (value,))
    high = backend.enqueue(prioridade=90)
    assert claim(backend, worker) == [low[0]]
    assert claim(backend, worker) == [low[1]]
    assert claim(backend, worker) == [high]


def test_another_queues_position_is_not_used(backend):
    first, second = backend.enqueue({}, {})
    worker = backend.worker()
    remember(backend, worker, 50, second)
    value = position(worker)
    value[0] = str(backend.store.queue_key + 1)
    worker.execute("SELECT set_config('nsjq.claim_position', %s, false)", (",".join(value),))
    assert claim(backend, worker) == [first]


def _entries_read_by_claim(backend, worker, expect: int = 1) -> int:
    """Claim one task (``expect`` of them); the claim index entries its scans read (before
    the visibility check of their rows: a dead entry counts), from the transaction's own
    statistics."""
    index = backend.value(
        "SELECT indexrelid FROM pg_index WHERE indrelid = %s::regclass "
        "AND pg_get_indexdef(indexrelid) LIKE %s",
        (backend.table, "%(prioridade DESC, data_hora, id) WHERE%pendente%"),
    )
    count = "SELECT pg_stat_get_xact_tuples_returned(%s)"
    # The counts not yet reported cover earlier transactions too: a difference.
    backend.store.begin(worker)
    before = worker.execute(count, (index,)).fetchone()[0]
    assert len(backend.store.claim_call(worker, None, None, 1, None)) == expect
    after = worker.execute(count, (index,)).fetchone()[0]
    backend.store.rollback(worker)
    return int(after - before)


@pytest.mark.fresh_queue  # counts the claim index's entries read: dead ones count
def test_under_a_held_snapshot_the_position_skips_the_tasks_claimed_since(backend):
    backend.enqueue(*[{} for _ in range(700)])
    holder = backend.client_conn()
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute(f"SELECT count(*) FROM {backend.table}").fetchone()
    try:
        worker = backend.worker()
        assert len(claim(backend, worker, 600)) == 600  # their entries stay: the snapshot
        worker.execute("SELECT set_config('nsjq.claim_position', '', false)")
        walked = _entries_read_by_claim(backend, worker)
        next_ready = backend.value(f"SELECT min(id) FROM {backend.table} WHERE status = 'pendente'")
        remember(backend, worker, 50, next_ready)
        skipped = _entries_read_by_claim(backend, worker)
        assert walked >= 600 and skipped < 10, (walked, skipped)
    finally:
        holder.rollback()


@pytest.mark.fresh_queue  # counts the claim index's entries read: dead ones count
def test_under_a_held_snapshot_a_look_up_walks_the_claimed_tasks_entries_once(backend):
    backend.enqueue(*[{} for _ in range(700)])
    holder = backend.client_conn()
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute(f"SELECT count(*) FROM {backend.table}").fetchone()
    try:
        worker = backend.worker()
        assert len(claim(backend, worker, 600)) == 600  # their entries stay: the snapshot
        # A look-up (no position) that claims: to the first ready row once, then from it.
        worker.execute("SELECT set_config('nsjq.claim_position', '', false)")
        claiming = _entries_read_by_claim(backend, worker)
        # A look-up that finds nothing ready: that one walk, nothing after it.
        assert len(claim(backend, worker, 100)) == 100
        worker.execute("SELECT set_config('nsjq.claim_position', '', false)")
        empty = _entries_read_by_claim(backend, worker, expect=0)
        assert 600 <= claiming < 1200 and 700 <= empty < 1400, (claiming, empty)
    finally:
        holder.rollback()


def mark_empty(backend, worker, until_us: int = FAR_FUTURE_US) -> None:
    """Set the session's position as a look-up that found nothing ready now would have
    (the claim function puts it a second earlier; here: now, so that the tasks claimed
    just before are behind it)."""
    now_us = backend.value("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
    value = f"{backend.store.queue_key},{until_us},50,{now_us},0,empty"
    worker.execute("SELECT set_config('nsjq.claim_position', %s, false)", (value,))


@pytest.mark.fresh_queue  # counts the claim index's entries read: dead ones count
def test_under_a_held_snapshot_an_idle_queue_is_not_looked_up_again_for_a_moment(backend):
    import datetime

    backend.enqueue(*[{} for _ in range(700)])
    holder = backend.client_conn()
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute(f"SELECT count(*) FROM {backend.table}").fetchone()
    try:
        worker = backend.worker()
        assert len(claim(backend, worker, 700)) == 700  # their entries stay: the snapshot
        # A look-up that finds nothing leaves an empty look-up's position behind it.
        worker.execute("SELECT set_config('nsjq.claim_position', '', false)")
        remember(backend, worker, 50, backend.value(f"SELECT max(id) FROM {backend.table}"))
        assert claim(backend, worker) == []
        assert position(worker)[4:6] == ["0", "empty"]
        # While it lives, "nothing" costs no walk of the 700 claimed tasks' entries.
        mark_empty(backend, worker)
        assert _entries_read_by_claim(backend, worker, expect=0) < 20
        # A task of its prioridade enqueued since: claimed from the position.
        mark_empty(backend, worker)
        new = backend.enqueue({})
        assert claim(backend, worker) == new
        # Another prioridade's, enqueued since: found in the due index; a look-up claims it.
        high = backend.enqueue({"prioridade": 90})
        assert claim(backend, worker) == high
        # A task that became ready since with an older data_hora (a transaction open for
        # over a second, say) waits for the position's end: the dispatcher's recheck.
        mark_empty(backend, worker)
        old = backend.enqueue(
            {
                "data_hora": datetime.datetime.now(datetime.timezone.utc)
                - datetime.timedelta(hours=1)
            }
        )
        assert claim(backend, worker) == []
        mark_empty(backend, worker, until_us=1)  # ended
        assert claim(backend, worker) == old
    finally:
        holder.rollback()


def test_a_child_released_by_its_parent_is_claimed_from_an_empty_position(backend):
    """A child waits with its insert's data_hora; released, it is due from then on, so a
    claim from an empty look-up's position finds it at once (it waited for the position's
    end, up to 5 s, when it kept a data_hora older than the position)."""
    from nsj_queue_lib.db.workflow_store import WorkflowStore

    parent = backend.enqueue()
    conn = backend.client_conn()
    child = backend.client(conn).insert_task("o", "d", "p", None, "x", after=[parent])
    conn.commit()
    backend.execute(
        f"UPDATE {backend.table} SET data_hora = data_hora - interval '1 hour' WHERE id = %s",
        (child,),
    )
    worker = backend.worker()
    assert claim(backend, worker) == [parent]
    mark_empty(backend, worker)
    backend.execute(f"UPDATE {backend.table} SET status = 'sucesso' WHERE id = %s", (parent,))
    WorkflowStore("postgres", backend.table).release_after_success(conn, [parent])
    conn.commit()
    assert claim(backend, worker) == [child]


@pytest.mark.fresh_queue  # counts the key index's scans
def test_a_claim_from_the_position_probes_one_window_of_a_keys_backlog(backend):
    """One process's queued calls (a lock key's backlog): only the key's head is claimable,
    and a claim from the position, looking for a group's worth, probed the key index for
    every one of them at every call. It probes the keyed rows of the position's window,
    and of the next one when the head has moved beyond it."""
    backlog = backend.enqueue(*[{"lock_key": "one"} for _ in range(1000)])
    worker = backend.worker()
    assert claim(backend, worker, 20) == [backlog[0]]  # a look-up: its window remembered
    assert len(position(worker)) == 9
    index = backend.value(
        "SELECT indexrelid FROM pg_index WHERE indrelid = %s::regclass "
        "AND pg_get_indexdef(indexrelid) LIKE %s",
        (backend.table, "%(lock_key, prioridade DESC, data_hora, id) WHERE%pendente%"),
    )
    # Scans, not entries: a probe reads the entries of the key's claimed tasks too until
    # they can be pruned, which a snapshot held elsewhere (a parallel test's) delays.
    count = "SELECT pg_stat_get_xact_numscans(%s)"
    window = 20 * 8  # the claim function's: eight rows per task asked for
    done, probes = backlog[0], []
    for expected in backlog[1:400]:  # past the first look-ups' windows
        backend.store.begin(worker)
        before = worker.execute(count, (index,)).fetchone()[0]
        rows = backend.store.claim_call(worker, done, "ok", 20, None)
        probes.append(worker.execute(count, (index,)).fetchone()[0] - before)
        backend.store.commit(worker)
        assert [row["id"] for row in rows] == [expected]  # in order, one at a time
        done = expected
    # One probe a keyed candidate: the window's, and the next window's when the head is
    # beyond it; before, every queued task's at every call.
    assert max(probes) <= 2 * window + 10, sorted(probes)
    assert statistics.median(probes) <= window + 10, sorted(probes)


@pytest.mark.fresh_queue  # counts the claim index's entries read
def test_a_claim_from_the_position_of_many_keys_walks_a_window_not_the_backlog(backend):
    """Calls to many processes behind a busy one's backlog (which fills the look-up's
    window): when a window is claimed, a claim from the position walks the next window,
    not every queued row to the backlog's end (a filter that kept keyed rows beyond the
    window from being probed walked them all: calls to 3,000 processes drained at three
    quarters of the speed)."""
    busy = backend.enqueue(*[{"lock_key": "busy"} for _ in range(128)])
    backlog = backend.enqueue(*[{"lock_key": f"k{i}"} for i in range(2000)])
    worker = backend.worker()
    assert claim(backend, worker, 4) == busy[:1]  # a look-up: its window remembered
    assert len(position(worker)) == 9
    index = backend.value(
        "SELECT indexrelid FROM pg_index WHERE indrelid = %s::regclass "
        "AND pg_get_indexdef(indexrelid) LIKE %s",
        (backend.table, "%btree (prioridade DESC, data_hora, id) WHERE%pendente%"),
    )
    count = "SELECT pg_stat_get_xact_tuples_returned(%s)"
    walked = []
    for start in range(0, 300, 4):  # two windows and more
        backend.store.begin(worker)
        before = worker.execute(count, (index,)).fetchone()[0]
        rows = backend.store.claim_call(worker, None, None, 4, None)
        walked.append(worker.execute(count, (index,)).fetchone()[0] - before)
        backend.store.commit(worker)
        assert [row["id"] for row in rows] == backlog[start : start + 4]
    # Dead entries count: the busy key's and the claimed tasks' since the position (450
    # at most while a parallel test holds a snapshot), then two windows of 128.
    assert max(walked) < 1000, sorted(walked)  # the walk to the end: 1,700 and more
