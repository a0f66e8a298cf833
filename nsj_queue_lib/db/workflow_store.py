"""The statements of dependencies between tasks (``nsj_queue_lib/workflow/``), per dialect.

One class for every dialect: the SQL lives in ``db/<dialect>/workflow.sql`` (the same
query names everywhere) and runs on the caller's connection, in its transaction
(a client's, a handler's ``bd_conn`` or a worker's). SingleStore has no such tables:
``for_connection`` refuses it with ``WorkflowUnsupported``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from nsj_queue_lib.db import latest_attempt, layout_cache
from nsj_queue_lib.db.dialect import (
    events_table_name,
    notify_channel,
    parents_table_name,
    release_routine_name,
    steps_table_name,
    waiting_table_name,
)
from nsj_queue_lib.db.moved_rows import retry_moved_rows
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import DatabaseError, QueueLibError, WorkflowUnsupported
from nsj_queue_lib.identifiers import check_table_name, split_table_name

DIALECTS = ("postgres", "mysql")
# What parent_state reads of the parent's latest attempt, in order.
_PARENT_STATE = ("id", "id_inicial", "status", "reenfileirado", "estouro_tentativas", "dead")
SERVER_STATUS_IN_TRANS = 1  # the MySQL protocol's flag: a transaction is open
T = TypeVar("T")


class WorkflowStore:
    """Dependencies of the queue ``queue_table`` on a ``dialect`` ('postgres', 'mysql')."""

    # The named queries' file (db/<dialect>/...): a subclass serves another part of the
    # workflow tables (db/step_store.py).
    queries_file = "workflow.sql"
    # What needs the tables, for the refusal's message.
    feature = "dependencies between tasks (after=)"

    def __init__(self, dialect: str, queue_table: str):
        if dialect not in DIALECTS:
            raise WorkflowUnsupported(
                f"{self.feature} need PostgreSQL or MySQL/MariaDB, not {dialect}"
            )
        check_table_name(queue_table, "queue table")
        self.dialect = dialect
        self.queue_table = queue_table
        self.channel = notify_channel(split_table_name(queue_table)[1])
        self.sql = self._render(dialect, queue_table, layout_cache.NO_PINS)
        # MySQL's partitioned layout: statements of unfinished rows by task id name the hot
        # partition (db/layout_cache.py says why).
        self._hot_sql = self.sql
        if dialect == "mysql":
            self._hot_sql = self._render(dialect, queue_table, layout_cache.HOT_PINS)

    def _render(self, dialect: str, queue_table: str, pins: dict[str, str]) -> dict[str, str]:
        """The named queries, with the layout's ``pins``."""
        values = dict(self.template_values(queue_table), **pins)
        return render_queries(dialect, values, self.queries_file)

    @staticmethod
    def template_values(queue_table: str) -> dict[str, str]:
        """The names the queries file's placeholders stand for."""
        return {
            "queue_table": queue_table,
            "parents_table": parents_table_name(queue_table),
            "waiting_table": waiting_table_name(queue_table),
            "release_function": release_routine_name(queue_table),
            "steps_table": steps_table_name(queue_table),
            "events_table": events_table_name(queue_table),
        }

    @classmethod
    def for_store(cls, store: Any, queue_table: str) -> WorkflowStore:
        """The dependencies next to a queue ``store`` (client or worker): its ``dialect``
        names the SQL (SingleStore's store says so, though it shares MySQL's driver);
        ``WorkflowUnsupported`` for a store without one (the in-memory queue)."""
        dialect = getattr(store, "dialect", None)
        name = dialect if isinstance(dialect, str) else type(store).__name__
        kind: Any = cls  # (mypy reads a class object as unhashable)
        found: WorkflowStore = _store(kind, name, queue_table)
        return found

    def tables(self) -> tuple[str, ...]:
        """The tables these statements need (an error naming one says db_gen --upgrade)."""
        return (
            parents_table_name(self.queue_table),
            waiting_table_name(self.queue_table),
            steps_table_name(self.queue_table),
            events_table_name(self.queue_table),
        )

    # -- statements --

    @contextlib.contextmanager
    def _cursor(self, conn: Any, what: str) -> Iterator[Any]:
        try:
            with conn.cursor() as cur:
                yield cur
        except QueueLibError:
            raise
        except Exception as exc:  # the driver's error, kept as the cause
            error = DatabaseError(f"workflow {what} failed: {exc}".strip())
            text = str(exc).lower()
            missing = "does not exist" in text or "doesn't exist" in text
            if missing and any(name.split(".")[-1].lower() in text for name in self.tables()):
                error = WorkflowUnsupported(
                    f"{what}: the queue has no workflow tables ({exc}); run db_gen --upgrade "
                    "(SingleStore has no workflows)"
                )
            raise error from exc

    def _partitioned(self, conn: Any) -> bool:
        """Whether the queue table has MySQL's partitioned layout (PostgreSQL's needs no
        pins here: it locks rows, never gaps)."""
        return self.dialect == "mysql" and layout_cache.partitioned(
            conn, self.dialect, self.queue_table
        )

    def _statement(self, conn: Any, name: str) -> str:
        plain = self.sql[name]
        if plain == self._hot_sql[name]:  # nothing to pin: no need to know the layout
            return plain
        return self._hot_sql[name] if self._partitioned(conn) else plain

    def _rows(self, conn: Any, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with self._cursor(conn, name) as cur:
            cur.execute(self._statement(conn, name), params)
            return [tuple(row) for row in cur.fetchall()]

    def _run(self, conn: Any, name: str, params: dict[str, Any]) -> int:
        with self._cursor(conn, name) as cur:
            cur.execute(self._statement(conn, name), params)
            return int(cur.rowcount or 0)

    def _locked_latest(self, conn: Any, task_id: int, share: bool) -> dict[str, Any] | None:
        """MySQL: the latest attempt of the task, row-locked without locking a gap
        (db/latest_attempt.py)."""
        partitioned = self._partitioned(conn)
        with self._cursor(conn, "latest attempt") as cur:
            lock = latest_attempt.FOR_SHARE if share else latest_attempt.FOR_UPDATE
            return latest_attempt.lock_latest(
                cur, self.dialect, self.queue_table, partitioned, task_id, lock=lock
            )

    def _ids(self, ids: Sequence[int]) -> Any:
        # psycopg adapts a list to an array (= ANY); PyMySQL a tuple to (a, b, ...) (IN).
        return [int(i) for i in ids] if self.dialect == "postgres" else tuple(int(i) for i in ids)

    def parent_state(self, conn: Any, task_id: int) -> dict[str, Any] | None:
        """The latest attempt of the task ``task_id`` belongs to, row-locked until the
        caller's transaction ends; None for an unknown id. On MySQL, the lock of
        db/latest_attempt.py (no gap locked); elsewhere three statements, each seeing the
        latest commit."""
        if self.dialect == "mysql":
            found = self._locked_latest(conn, task_id, share=True)
            if found is None:
                return None
            rows = [tuple(found[c] for c in _PARENT_STATE)]
        else:
            first = self._rows(conn, "parent_first", {"id": task_id})
            if not first:
                return None
            latest = self._rows(conn, "parent_latest", {"first": int(first[0][0])})
            attempt_id = int(first[0][0]) if latest[0][0] is None else int(latest[0][0])
            rows = self._rows(conn, "parent_state", {"id": attempt_id})
            if not rows:
                return None
        attempt, first_id, status, reenfileirado, estouro, dead = rows[0]
        return {
            "id": int(attempt),
            "first_id": int(first_id),
            "status": status,
            "reenfileirado": bool(reenfileirado),
            "estouro_tentativas": bool(estouro),
            "dead": bool(dead),
        }

    def retrying_moved_rows(self, conn: Any, reads: Callable[[], T]) -> T:
        """``reads()``, run again under a savepoint when a row it locks moved to another
        partition meanwhile (PostgreSQL's partitioned layout: ``moved_rows``); as it is
        elsewhere."""
        if self.dialect != "postgres":
            return reads()
        return retry_moved_rows(conn, reads)

    def add_child(
        self,
        conn: Any,
        child_id: int,
        edges: Sequence[tuple[int, bool]],
        pending: int,
        on_parent_failure: str,
    ) -> None:
        """The edges of a new child, (parent's first attempt id, settled: the parent had
        finished already); with ``pending`` parents unfinished, its count too."""
        with self._cursor(conn, "add_edge") as cur:
            cur.executemany(
                self.sql["add_edge"],
                [edge_params(p, child_id, done, pending == 1) for p, done in edges],
            )
        if pending > 0:
            params = {"child": child_id, "pending": pending, "on_parent_failure": on_parent_failure}
            self._run(conn, "add_waiting", params)

    def set_new_status(self, conn: Any, task_id: int, status: str, mensagem: str | None) -> None:
        self._run(conn, "set_new_status", {"id": task_id, "status": status, "mensagem": mensagem})

    def first_id(self, conn: Any, task_id: int) -> int | None:
        rows = self._rows(conn, "first_id", {"id": task_id})
        return int(rows[0][0]) if rows else None

    def dependents(self, conn: Any, parent_ids: Sequence[int]) -> list[tuple[int, int, str]]:
        """(parent, child, on_parent_failure) of the waiting children of these parents
        whose edge is not settled yet, their counts and edges locked."""
        if not parent_ids:
            return []
        rows = self._rows(conn, "dependents", {"ids": self._ids(parent_ids)})
        return [(int(p), int(c), str(mode)) for p, c, mode in rows]

    def settle_edges(self, conn: Any, parent_ids: Sequence[int]) -> None:
        """These parents finished: their edges are settled, so they are never counted
        again (``dependents`` locked those of waiting children)."""
        if parent_ids:
            self._run(conn, "settle_edges", {"ids": self._ids(parent_ids)})

    def count_down(self, conn: Any, child_id: int, parents: Sequence[int]) -> bool:
        """These parents of ``child_id`` (first attempts' ids) ended, their edges settled;
        True when that released it."""
        params = {"child": child_id, "n": len(parents), "parents": [int(p) for p in parents]}
        self._run(conn, "count_down", params)
        return self._run(conn, "release_child", {"child": child_id}) > 0

    def cancel_waiting(self, conn: Any, child_id: int, mensagem: str) -> bool:
        return self._run(conn, "cancel_waiting", {"child": child_id, "mensagem": mensagem}) > 0

    def notify_ready(self, conn: Any) -> None:
        """Wake the queue's workers at commit (PostgreSQL; others poll)."""
        if self.dialect == "postgres":
            self._rows(conn, "notify_ready", {"channel": self.channel})

    def fresh_looks(self, conn: Any) -> bool:
        """Whether reads on ``conn`` see the latest commit each time if each look ends the
        transaction it opened. PostgreSQL: its reads do so anyway under READ COMMITTED (the
        default), so nothing is ended (False). MySQL/MariaDB (REPEATABLE READ keeps the first
        read's snapshot): True, each look ending the transaction it read in, unless the
        server reports a transaction open with writes or an explicit BEGIN (the status
        flag of its last OK reply): ``ValueError`` then, since ending it would lose them
        and keeping it would hide the task's end. Reads alone do not raise the flag: an
        open transaction that only read is ended (it held nothing but its snapshot)."""
        if self.dialect == "postgres":
            return False
        if getattr(conn, "server_status", 0) & SERVER_STATUS_IN_TRANS:
            raise ValueError(
                "wait_for_task: the connection has a transaction open; on MySQL/MariaDB its "
                "snapshot would hide the task's end: commit (or roll back) first"
            )
        return True

    def parents_of(self, conn: Any, child_id: int) -> list[tuple[int, int]]:
        """(parent's first attempt id, its latest attempt id) of each parent of the child."""
        return [(int(p), int(a)) for p, a in self._rows(conn, "parents_of", {"child": child_id})]

    def release_after_success(self, conn: Any, first_ids: Sequence[int]) -> None:
        """The children of these tasks just written 'sucesso' (their first attempts' ids),
        released in the same transaction: one locking read, then one call per parent that
        has children (never a query per child)."""
        if first_ids:
            self._release(conn, "children_of", first_ids)

    def release_after_success_of_attempts(self, conn: Any, attempt_ids: Sequence[int]) -> None:
        """``release_after_success`` for attempts' ids."""
        if attempt_ids:
            self._release(conn, "children_of_attempts", attempt_ids)

    def _release(self, conn: Any, probe: str, ids: Sequence[int]) -> None:
        """The children of several parents are locked in one child id order, as every
        settlement locks them, so that two commit groups with shared children queue
        instead of deadlocking: PostgreSQL's function takes every parent at once;
        MySQL's procedure takes one, so the children are locked first."""
        parents = sorted(int(p) for (p,) in self._rows(conn, probe, {"ids": self._ids(ids)}))
        if not parents:
            return
        if self.dialect == "postgres":
            self._rows(conn, "release_children", {"parents": parents})
            return
        if len(parents) > 1:
            children = self._rows(conn, "children_to_lock", {"ids": self._ids(parents)})
            if children:
                self._rows(
                    conn, "lock_children", {"ids": self._ids(sorted(c for (c,) in children))}
                )
        for parent in parents:
            self._rows(conn, "release_children", {"parent": parent})


def edge_params(parent: int, child: int, settled: bool, one_pending: bool) -> dict[str, Any]:
    """add_edge's parameters. ``sole``: the child's only unfinished parent (PostgreSQL
    marks its edge so, and the parent's success releases the child by it alone)."""
    return {
        "parent": parent,
        "child": child,
        "settled": settled,
        "sole": one_pending and not settled,
    }


@functools.lru_cache(maxsize=256)
def _store(kind: Any, dialect: str, queue_table: str) -> WorkflowStore:
    """One store per (kind: a WorkflowStore class, dialect, queue): it holds only its rendered
    statements."""
    return kind(dialect, queue_table)
