"""The purge of the side tables (db/side_store.py): the rows of dependencies, workflows,
process task lists, steps and events that name only tasks the purge took go with them, in
both layouts; those of tasks still there, or still to run, stay."""

from __future__ import annotations

from typing import Any

import pytest

from nsj_queue_lib.db.side_store import SidePurge
from tests.integration.store.backends import LOCKING, MYSQL_PARTITIONED, PARTITIONED, ago, on

pytestmark = on(*LOCKING)

OLD = 40 * 86400


class Aging:
    """Ends tasks long enough ago for a purge at 30 days to take them: on the plain layout
    by their data_hora, on the partitioned ones in a day partition 40 days old."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.partitioned = backend.kind in ("partitioned", "mysql-partitioned")
        self.day: int | None = None
        if not self.partitioned:
            return
        if backend.dialect == "postgres":
            from nsj_queue_lib.db.postgres import retention

            self.day = int(backend.value(retention.TODAY)) - 40
        else:
            self.day = int(backend.value("SELECT UNIX_TIMESTAMP() DIV 86400")) - 40
        self.add_day(self.day)

    def add_day(self, day: int) -> None:
        backend = self.backend
        if backend.dialect == "postgres":
            backend.execute(
                f"CREATE TABLE {backend.table}_p{day} PARTITION OF {backend.table} "
                f"FOR VALUES FROM ({day}) TO ({day + 1})"
            )
            return
        # Partitions are added at the end only: the oldest one (a week) is split, and the
        # day is a partition of its own, as an earlier release's.
        with backend.admin.cursor() as cur:
            cur.execute(
                "SELECT PARTITION_NAME, PARTITION_DESCRIPTION FROM information_schema.PARTITIONS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND PARTITION_NAME <> 'p_hot' "
                "ORDER BY PARTITION_ORDINAL_POSITION LIMIT 1",
                (backend.queue.database, backend.queue.name),
            )
            first, bound = cur.fetchone()
        backend.execute(
            f"ALTER TABLE {backend.table} REORGANIZE PARTITION {first} INTO ("
            f"PARTITION p{day} VALUES LESS THAN ({day + 1}), "
            f"PARTITION {first} VALUES LESS THAN ({bound}))"
        )

    def days(self) -> set[int]:
        """The old days still there."""
        assert self.day is not None
        if self.backend.dialect == "postgres":
            sql = "SELECT count(*) FROM pg_class WHERE relname = %s"
            return {
                day
                for day in (self.day, self.day + 1)
                if self.backend.value(sql, (f"{self.backend.queue.name}_p{day}",))
            }
        names = _partition_names(self.backend)
        return {day for day in (self.day, self.day + 1) if f"p{day}" in names}

    def enqueue(self, n: int = 1) -> list[int]:
        tasks = [dict(chave_externa=f"t{i}", data_hora=ago(OLD)) for i in range(n)]
        return list(self.backend.enqueue(*tasks))

    def end(self, status: str, *ids: int, later: bool = False) -> None:
        """``later``: on the second old day (plain layout: old all the same)."""
        for task_id in ids:
            if self.partitioned:
                assert self.day is not None
                self.backend.execute(
                    f"UPDATE {self.backend.table} SET status = %s, finished_day = %s WHERE id = %s",
                    (status, self.day + int(later), task_id),
                )
            else:
                self.backend.execute(
                    f"UPDATE {self.backend.table} SET status = %s, data_hora = %s WHERE id = %s",
                    (status, ago(OLD), task_id),
                )


def _partition_names(backend: Any) -> list[str]:
    with backend.admin.cursor() as cur:
        cur.execute(
            "SELECT PARTITION_NAME FROM information_schema.PARTITIONS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (backend.queue.database, backend.queue.name),
        )
        return [str(name) for (name,) in cur.fetchall()]


def _insert(backend: Any, table: str, columns: str, *rows: tuple) -> None:
    marks = ", ".join(["%s"] * len(rows[0]))
    for row in rows:
        backend.execute(f"INSERT INTO {backend.table}_{table} ({columns}) VALUES ({marks})", row)


def _ids(backend: Any, table: str, column: str) -> set[Any]:
    conn = backend.admin
    sql = f"SELECT {column} FROM {backend.table}_{table}"
    if backend.dialect == "postgres":
        return {row[0] for row in conn.execute(sql).fetchall()}
    with conn.cursor() as cur:
        cur.execute(sql)
        return {row[0] for row in cur.fetchall()}


def _purge(backend: Any, store: Any, worker: Any, limit: int = 1000) -> int:
    """A purge service's run, as runtime/purge.py makes it: rounds until one is short."""
    sides = SidePurge.for_run(store, worker, limit)
    assert sides is not None
    while store.purge_round(worker, 30, limit, sides=sides) >= limit:
        worker.commit()
    worker.commit()
    return sides.cleared


def test_the_side_rows_of_purged_tasks_go_and_the_others_stay(backend, store, worker):
    aging = Aging(backend)
    parent, child, lone_parent, wf_old, chain_first, chain_next = aging.enqueue(6)
    waiting_child, wf_young, young = backend.enqueue({}, {}, {})
    aging.end("sucesso", parent, child, lone_parent, wf_old)
    backend.set_status("sucesso", wf_young, young)
    backend.set_status("aguardando", waiting_child)
    # A failed first attempt whose retry waits: on the partitioned layout the day drops
    # with the first attempt, yet the task is not over.
    aging.end("falha", chain_first)
    backend.execute(
        f"UPDATE {backend.table} SET status = 'agendada', id_inicial = %s, payload = NULL "
        f"WHERE {backend.hot}id = %s",
        (chain_first, chain_next),
    )
    _insert(
        backend,
        "parents",
        "parent_id, child_id",
        (parent, child),
        (lone_parent, waiting_child),
        (young, chain_first),
    )
    _insert(backend, "waiting", "child_id, pending_parents", (child, 0), (waiting_child, 1))
    steps = [(t, "s", "1", t) for t in (parent, child, chain_first, young)]
    _insert(backend, "steps", "task_id, name, result, attempt_id", *steps)
    _insert(backend, "events", "task_id, name", (child, "e"), (chain_first, "e"), (young, "e"))
    _insert(backend, "workflows", "id, name", (parent, "gone"), (wf_old, "half"))
    _insert(
        backend,
        "workflow_tasks",
        "workflow_id, seq, task_id",
        (parent, 0, parent),
        (parent, 1, child),
        (wf_old, 0, wf_old),
        (wf_old, 1, wf_young),
    )
    _insert(backend, "processes", "process_id, processo, state", ("p1", "proc", "{}"))
    _insert(
        backend,
        "process_tasks",
        "task_id, process_id, kind",
        (parent, "p1", "start"),
        (young, "p1", "call"),
    )
    _insert(backend, "process_events", "process_id, task_id, event_type", ("p1", parent, "x"))

    cleared = _purge(backend, store, worker)

    gone = {parent, child, lone_parent, wf_old}
    assert backend.row(waiting_child)["status"] == "aguardando"
    assert not gone & set(backend.statuses())
    assert cleared == 4
    # An edge goes once both its ends are purged; a child waiting keeps its parents.
    assert _ids(backend, "parents", "child_id") == {waiting_child, chain_first}
    assert _ids(backend, "waiting", "child_id") == {waiting_child}
    assert _ids(backend, "steps", "task_id") == {chain_first, young}
    assert _ids(backend, "events", "task_id") == {chain_first, young}
    # A workflow goes with its last task; one with a task left keeps its row.
    assert _ids(backend, "workflows", "id") == {wf_old}
    assert _ids(backend, "workflow_tasks", "task_id") == {wf_young}
    assert _ids(backend, "process_tasks", "task_id") == {young}
    # The process's own row and history are not the purge's.
    assert _ids(backend, "processes", "process_id") == {"p1"}
    assert _ids(backend, "process_events", "task_id") == {parent}

    # The chain's retry ends (on the partitioned layout a day after its first attempt's):
    # the task goes, and its rows with it. The edge waits for its other end (young).
    if aging.partitioned:
        aging.add_day(aging.day + 1)
    aging.end("sucesso", chain_next, later=True)
    _purge(backend, store, worker)
    assert backend.row(chain_next) is None
    assert _ids(backend, "steps", "task_id") == {young}
    assert _ids(backend, "events", "task_id") == {young}
    assert _ids(backend, "parents", "child_id") == {waiting_child, chain_first}


@on(PARTITIONED, MYSQL_PARTITIONED)  # the plain layout's side rows go in the round's transaction
def test_a_day_whose_side_rows_are_not_cleared_is_not_dropped(backend, store, worker):
    """A service stopping in the middle of a day's side rows leaves the day for its next
    run: dropped first, the rows not yet cleared would name tasks no walk finds again."""
    aging = Aging(backend)
    tasks = aging.enqueue(3)
    aging.end("sucesso", *tasks)
    _insert(
        backend, "steps", "task_id, name, result, attempt_id", *[(t, "s", "1", t) for t in tasks]
    )
    sides = SidePurge.for_run(store, worker, 2, stopping=iter([False, True]).__next__)
    store.purge_round(worker, 30, 2, sides=sides)
    worker.commit()
    assert aging.days() == {aging.day}
    assert len(_ids(backend, "steps", "task_id")) == 1  # the first round's two went
    _purge(backend, store, worker)  # the day walked again from its start
    assert aging.days() == set() and _ids(backend, "steps", "task_id") == set()


@on(PARTITIONED, MYSQL_PARTITIONED)
@pytest.mark.fresh_queue  # side tables with no row at all
def test_a_day_is_dropped_without_reading_its_rows_when_no_side_table_holds_one(
    backend, store, worker
):
    """Without dependencies, waits or processes the day's rows are not walked: a service
    stopping at once (which stops a walk before its first round) still drops the day."""
    aging = Aging(backend)
    tasks = aging.enqueue(3)
    aging.end("sucesso", *tasks)
    sides = SidePurge.for_run(store, worker, 2, stopping=lambda: True)
    store.purge_round(worker, 30, 2, sides=sides)
    worker.commit()
    assert aging.days() == set()


@pytest.mark.parametrize("limit", [2])
def test_rounds_are_bounded_and_each_clears_its_own_rows(backend, store, worker, limit):
    """Five purged tasks in rounds of two: every round's side rows go with it."""
    aging = Aging(backend)
    tasks = aging.enqueue(5)
    aging.end("sucesso", *tasks)
    _insert(
        backend, "steps", "task_id, name, result, attempt_id", *[(t, "s", "1", t) for t in tasks]
    )
    assert _purge(backend, store, worker, limit) == 5
    assert _ids(backend, "steps", "task_id") == set()
