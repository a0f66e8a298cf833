"""The purge of the tables next to a queue table that name tasks by their first attempt's
id: dependencies (``<q>_parents``, ``<q>_waiting``), workflows (``<q>_workflows``,
``<q>_workflow_tasks``), a process's task list (``<q>_process_tasks``), durable steps
and waits (``<q>_steps``, ``<q>_events``). SQL in ``db/<dialect>/sides.sql``.

The purge hands over the tasks of the rows it just deleted (plain layout, in the round's
transaction) or, before dropping a history partition, walks that partition by its primary key
in rounds of their own (partitioned layout). Either way only the tasks named are looked
up, each by an index, so a round costs what the purge took, whatever the side tables hold.

A task counts as purged when its first attempt is gone and no later attempt of it is
still to run: on the partitioned layout a dropped partition can take a first attempt whose
retry waits in the hot partition (it got the payload copied), and that task's checkpoints
and edges are still needed. An edge goes only when both its ends are purged: a parent
that runs on still settles its edges, and a child that waits still counts its parents.
The process rows and their events are the process's history: they go with the process
(``remove_after``, process/removal.py), not here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from nsj_queue_lib.db.dialect import (
    events_table_name,
    parents_table_name,
    process_tasks_table_name,
    steps_table_name,
    waiting_table_name,
    workflow_tasks_table_name,
    workflows_table_name,
)
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.db.workflow_store import WorkflowStore
from nsj_queue_lib.identifiers import split_table_name

# The partitioned layout's hot partition key (db/<dialect>/layout.py: HOT_DAY, both 1).
_HOT_PIN = "q.finished_day = 1 AND "
# Filled per call: a partition's name is known only when it is about to be dropped.
_PARTITION = "{partition}"
# MariaDB turns an IN list of in_predicate_conversion_threshold (1000) values or more into
# a join with a table of them, and then read the chain index's whole table for the
# unfinished tasks (153 ms at 200,000 pending rows, 8 ms below): its lists stay shorter.
MYSQL_LIST = 500


class SideStore(WorkflowStore):
    """The side tables' purge for the queue ``queue_table`` on a ``dialect``."""

    queries_file = "sides.sql"
    feature = "the purge of the side tables"

    def __init__(self, dialect: str, queue_table: str):
        super().__init__(dialect, queue_table)
        # The partitioned layout's statements: the unfinished attempts read in the hot
        # partition alone (pruned to it, not probed in every day).
        self.sql_partitioned = render_queries(
            dialect,
            dict(self.template_values(queue_table), hot_q=_HOT_PIN),
            self.queries_file,
        )

    @staticmethod
    def template_values(queue_table: str) -> dict[str, str]:
        return {
            **WorkflowStore.template_values(queue_table),
            "workflows_table": workflows_table_name(queue_table),
            "workflow_tasks_table": workflow_tasks_table_name(queue_table),
            "process_tasks_table": process_tasks_table_name(queue_table),
            "hot_q": "",
            "partition": _PARTITION,
        }

    @classmethod
    def for_store(cls, store: Any, queue_table: str) -> SideStore:
        found = super().for_store(store, queue_table)
        assert isinstance(found, SideStore)
        return found

    def tables(self) -> tuple[str, ...]:
        return side_tables(self.queue_table)

    def present(self, conn: Any) -> frozenset[str]:
        """The side tables that exist (db_gen --upgrade makes the missing ones), read in
        the caller's transaction."""
        names = side_tables(self.queue_table)
        if self.dialect == "postgres":
            rows = self._rows(conn, "tables", {"names": list(names)})
            return frozenset(str(name) for (name,) in rows)
        schema, _ = split_table_name(self.queue_table)
        bare = {split_table_name(name)[1].lower(): name for name in names}
        rows = self._rows(conn, "tables", {"schema": schema, "names": tuple(bare)})
        return frozenset(bare[str(name).lower()] for (name,) in rows if str(name).lower() in bare)

    def with_rows(self, conn: Any, present: frozenset[str]) -> frozenset[str]:
        """Those of the ``present`` side tables that hold a row at all (one look-up each),
        in the caller's transaction."""
        names = sorted(present)
        if not names:
            return frozenset()
        # Identifiers of this library (side_tables), never user input.
        probes = ", ".join(f"EXISTS (SELECT 1 FROM {name})" for name in names)
        with self._cursor(conn, "side tables with rows") as cur:
            cur.execute(f"SELECT {probes}")
            found = cur.fetchone()
        return frozenset(name for name, has in zip(names, found, strict=True) if has)

    def partition_tasks(
        self, conn: Any, partition: str, after: int, limit: int
    ) -> tuple[list[int], set[int], int | None]:
        """The tasks of up to ``limit`` rows of a history partition past id ``after`` (its
        primary key's order), those of them whose first attempt is one of the rows, and
        the last row's id (None: no row left)."""
        sql = self.sql["partition_tasks"].replace(_PARTITION, partition)
        with self._cursor(conn, "partition_tasks") as cur:
            cur.execute(sql, {"after": after, "limit": limit})
            rows = cur.fetchall()
        if not rows:
            return [], set(), None
        tasks = [int(task) for _, task in rows]
        firsts = {int(row_id) for row_id, task in rows if row_id == task}
        return tasks, firsts, int(rows[-1][0])

    def clear(
        self,
        conn: Any,
        candidates: Iterable[int],
        present: frozenset[str],
        days: range | None = None,
        firsts: Iterable[int] = (),
    ) -> int:
        """The side rows of those of ``candidates`` (first attempts' ids) the purge took,
        deleted in the caller's transaction from the ``present`` side tables; how many
        tasks were purged. ``days``: those of the partition about to be dropped, whose rows count
        as gone (partitioned layout), ``firsts`` those of the candidates whose first
        attempt is in it (not looked for elsewhere: an id is in one partition)."""
        tasks = sorted(set(candidates))
        if not tasks or not present:
            return 0
        known = frozenset(firsts)
        if len(tasks) > self._list:
            return sum(self.clear(conn, part, present, days, known) for part in self._parts(tasks))
        gone = self._purged(conn, tasks, days, known)
        if not gone:
            return 0
        ids = self._ids(gone)
        parents = parents_table_name(self.queue_table)
        if parents in present:
            others = [int(o) for (o,) in self._rows(conn, "edge_ends", {"ids": ids})]
            outside = sorted(set(others) - set(gone))
            dead = gone + [
                task for part in self._parts(outside) for task in self._purged(conn, part, days)
            ]
            for statement in ("delete_edges_as_child", "delete_edges_as_parent"):
                self._run(conn, statement, {"ids": ids, "gone": self._ids(dead)})
        for table, statement in (
            (waiting_table_name(self.queue_table), "delete_waiting"),
            (steps_table_name(self.queue_table), "delete_steps"),
            (events_table_name(self.queue_table), "delete_events"),
            (process_tasks_table_name(self.queue_table), "delete_process_tasks"),
        ):
            if table in present:
                self._run(conn, statement, {"ids": ids})
        if workflow_tasks_table_name(self.queue_table) in present:
            self._clear_workflows(conn, ids, present)
        return len(gone)

    @property
    def _list(self) -> int:
        """The longest id list a statement gets."""
        return MYSQL_LIST if self.dialect == "mysql" else 1 << 30

    def _parts(self, ids: Sequence[int]) -> list[Sequence[int]]:
        return [ids[i : i + self._list] for i in range(0, len(ids), self._list)]

    def _purged(
        self,
        conn: Any,
        tasks: Sequence[int],
        days: range | None,
        firsts: frozenset[int] = frozenset(),
    ) -> list[int]:
        """Those of ``tasks`` whose first attempt is gone (the partition of ``days`` counted as
        gone, ``firsts``' first attempts known to be there) and which have no attempt
        still to run."""
        ids = self._ids(tasks)
        alive: list[tuple[Any, ...]] = []
        if days is None:
            alive = self._rows(conn, "first_attempts", {"ids": ids})
            sql = self.sql
        else:
            # A probe of every partition's primary key per id: only for the tasks not known.
            unknown = [task for task in tasks if task not in firsts]
            if unknown:
                params = {"ids": self._ids(unknown), "low": days.start, "bound": days.stop}
                alive = self._rows(conn, "first_attempts_elsewhere", params)
            sql = self.sql_partitioned
        with self._cursor(conn, "unfinished_tasks") as cur:
            cur.execute(sql["unfinished_tasks"], {"ids": ids})
            alive += [tuple(row) for row in cur.fetchall()]
        kept = {int(row[0]) for row in alive}
        return [task for task in tasks if task not in kept]

    def _clear_workflows(self, conn: Any, ids: Any, present: frozenset[str]) -> None:
        if self.dialect == "postgres":
            workflows = self._rows(conn, "delete_workflow_tasks", {"ids": ids})
        else:
            workflows = self._rows(conn, "workflows_of", {"ids": ids})
            self._run(conn, "delete_workflow_tasks", {"ids": ids})
        touched = sorted({int(w) for (w,) in workflows})
        if touched and workflows_table_name(self.queue_table) in present:
            self._run(conn, "delete_workflows", {"ids": self._ids(touched)})


def side_tables(queue_table: str) -> tuple[str, ...]:
    """The side tables the purge clears, where they exist."""
    return (
        parents_table_name(queue_table),
        waiting_table_name(queue_table),
        steps_table_name(queue_table),
        events_table_name(queue_table),
        workflows_table_name(queue_table),
        workflow_tasks_table_name(queue_table),
        process_tasks_table_name(queue_table),
    )


class SidePurge:
    """One purge run's side-table purge, handed to ``store.purge_round``: the plain layout
    calls ``tasks`` in each round's transaction with the tasks of the rows it deleted; the
    partitioned layout calls ``partition`` before it drops a history partition."""

    def __init__(self, side: SideStore, present: frozenset[str], limit: int, stopping: Any = None):
        self.side = side
        self.present = present
        self.limit = limit
        self.stopping = stopping or (lambda: False)
        self.cleared = 0

    @classmethod
    def for_run(cls, store: Any, conn: Any, limit: int, stopping: Any = None) -> SidePurge | None:
        """The run's side purge, or None where the queue has no side table (SingleStore,
        the in-memory queue, a queue db_gen has not given them); ``conn`` idle on return."""
        queue_table = getattr(store, "queue_table", None)
        if not isinstance(queue_table, str) or getattr(store, "dialect", None) not in (
            "postgres",
            "mysql",
        ):
            return None
        side = SideStore.for_store(store, queue_table)
        try:
            present = side.present(conn)
        finally:
            conn.commit()
        return cls(side, present, limit, stopping) if present else None

    def tasks(self, conn: Any, candidates: Iterable[int]) -> None:
        """The side rows of these tasks' purge, in the caller's transaction (the round's:
        they go together, or neither)."""
        self.cleared += self.side.clear(conn, candidates, self.present)

    def partition(self, conn: Any, partition: str, days: range) -> bool:
        """The side rows of the tasks of ``partition`` (its rows' days: ``days``), about to
        be dropped, in rounds of ``limit`` rows each committed; whether the walk reached its
        end (not when the service is stopping: the partition is then dropped by a later
        run, which walks it again)."""
        # The walk reads every row of the partition, a round per `limit` (11 s for a day of
        # 320,000 rows at 50M rows of history): none when no side table holds a row (a
        # queue without dependencies, waits or processes), and only the tables that do.
        holding = self.side.with_rows(conn, self.present)
        conn.commit()
        if not holding:
            return True
        after = 0
        while not self.stopping():
            tasks, firsts, last = self.side.partition_tasks(conn, partition, after, self.limit)
            if last is None:
                conn.commit()
                return True
            self.cleared += self.side.clear(conn, tasks, holding, days, firsts)
            conn.commit()
            after = last
        conn.rollback()
        return False
