"""A task whose transaction ended before its handler started is given back, not run
(runtime/attempt.py, issue 36); when giving back fails too, its connection is dropped (its
database locks go with it) and its liveness is told, so that the retry service can rescue
the task: nothing is left held."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.task_session import TaskSession
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.retry_policy import RetryPolicies
from nsj_queue_lib.runtime.attempt import Attempts
from nsj_queue_lib.runtime.running import RunningTasks
from nsj_queue_lib.settings import Settings


class Store:
    def __init__(self, broken: bool):
        self.broken = broken
        self.calls: list[str] = []

    def in_transaction(self, conn: Any) -> bool:
        return False  # the transaction is gone

    def begin(self, conn: Any) -> None:
        self.calls.append("begin")
        if self.broken:
            raise DatabaseError("server closed the connection unexpectedly")

    def release(self, conn: Any, task_id: int) -> int:
        self.calls.append(f"release {task_id}")
        return 1

    def commit(self, conn: Any) -> None:
        self.calls.append("commit")


class Liveness:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def unlock_in_transaction(self, conn: Any, task: TaskRecord) -> None:
        self.calls.append(("unlock", conn))

    def after_settled(self, task: TaskRecord, conn: Any = None) -> None:
        self.calls.append(("after_settled", conn))

    def claim(self, conn: Any, claim_next: bool = True) -> Claim | None:
        self.calls.append(("claim", conn))
        return None


class Connections:
    def __init__(self) -> None:
        self.discarded: list[Any] = []

    def discard(self, conn: Any, replace: bool = True) -> Any:
        self.discarded.append(conn)
        return "a fresh connection" if replace else None


def attempts(store: Store, liveness: Liveness, connections: Connections) -> Attempts:
    settings = Settings(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q")
    return Attempts(
        "q",
        TaskSession(store, liveness),
        liveness,
        RunningTasks(),
        connections,  # type: ignore[arg-type]
        lambda row, conn: "never runs",
        policies=RetryPolicies.build(settings),
    )


TASK = TaskRecord.from_row(dict(id=7, tentativa=1, dead=False, payload="{}"))


def test_a_task_whose_transaction_is_gone_goes_back_and_the_drain_claims_on():
    store, liveness, connections = Store(broken=False), Liveness(), Connections()
    parts = attempts(store, liveness, connections)
    assert parts.transaction_gone("conn")
    assert parts.give_back_unstarted("conn", TASK, True) == ("conn", None)
    assert store.calls == ["begin", "release 7", "commit"]
    assert liveness.calls == [("unlock", "conn"), ("after_settled", "conn"), ("claim", "conn")]
    assert connections.discarded == []


def test_a_failed_give_back_drops_the_connection_and_frees_the_liveness_lock():
    store, liveness, connections = Store(broken=True), Liveness(), Connections()
    parts = attempts(store, liveness, connections)
    assert parts.give_back_unstarted("conn", TASK, True) == ("a fresh connection", None)
    assert connections.discarded == ["conn"]  # closed: its database locks go with it
    # A lock on the socket server is released here; nothing is claimed on the broken conn.
    assert liveness.calls == [("after_settled", None)]
    assert parts.running.tasks() == []  # never started
