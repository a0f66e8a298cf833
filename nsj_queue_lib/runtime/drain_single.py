"""The drain of one commit per task: each claimed task commits with its handler's writes.

A slot holds a pooled connection while it has work. On it:
1. the claim marks one ready task 'processando' and takes the task's liveness
   lock (a session-level lock the retry service checks) in the same
   statement, before the claim commits;
2. the handler runs in a transaction on that connection (``attempt.py``);
3. success: 'sucesso' + unlock, the claim of the next task and the commit of
   both in one round trip (the task session's ``complete_and_claim``);
   failure: the handler's writes undone, then 'falha' and the next attempt (or
   the dead letter) while the liveness lock is still held, then unlock, all
   committed (``failures.py``, the session's ``fail``).
A slot that claimed a task wakes another idle one, so a burst drains without
further notifications. Whatever happens, a task ends settled or 'processando'
without a liveness lock, which the retry service rescues: it is never lost.

This is the drain of the async handlers, of the socket server's liveness
locks, of QUEUE_COMPAT_1_2_2 and of QUEUE_BATCH_SIZE=1; the default on
PostgreSQL commits in groups (``drain_group.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.exceptions import AttemptFenced, DatabaseError, TaskSuspended
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim
from nsj_queue_lib.runtime.attempt import Attempts
from nsj_queue_lib.runtime.failures import Failures
from nsj_queue_lib.runtime.handler_commits import SingleCommits

logger = get_logger("executor")


class SingleDrain:
    def __init__(
        self,
        attempts: Attempts,
        failures: Failures,
        stop: threading.Event,
        wake_one_idle: Callable[[], bool],
    ):
        self.attempts = attempts
        self.failures = failures
        self.connections = attempts.connections
        self.running = attempts.running
        self.stop = stop
        self.wake_one_idle = wake_one_idle

    def claim_next(self) -> bool:
        return not self.stop.is_set()

    def drain(self) -> bool:
        """Claim and run tasks until none is ready or the worker stops; False (a slot drains
        again only when woken)."""
        conn = self.connections.get()
        if conn is None:
            return False
        queue = self.attempts.queue_name
        with self.running.draining():
            try:
                claimed = self.attempts.session.claim(conn, self.claim_next())
                while claimed is not None:
                    self.wake_one_idle()  # there may be more: let an idle slot look too
                    conn, claimed = self.run(conn, claimed)
            except DatabaseError as exc:
                logger.warning("queue=%s: %s", queue, exc)  # "claim failed: ..."
                conn = self.connections.discard(conn, replace=False)
            except Exception as exc:  # noqa: BLE001 - the lock server is unreachable: claim again when woken
                logger.warning("queue=%s: claim abandoned: %s", queue, exc)
            finally:
                self.connections.put_back(conn)
        return False

    def run(self, conn: Any, claimed: Claim) -> tuple[Any, Claim | None]:
        """Run one claimed task; (the connection to go on with, the next claimed task)."""
        attempts, session = self.attempts, self.attempts.session
        if attempts.transaction_gone(conn):
            return attempts.give_back_unstarted(conn, claimed.task, self.claim_next())
        item = attempts.start(conn, claimed)
        task = item.task
        item.context.commits = SingleCommits(session, conn, task)
        try:
            outcome = attempts.call_handler(item)
            if outcome is not None:
                attempts.after_handler(item.context)
            if isinstance(outcome, TaskSuspended):
                # A durable wait committed the task 'pendente' again, its lock freed.
                attempts.suspended(task, outcome)
                session.after_settled(task, conn)
                return conn, session.claim(conn, self.claim_next())
            if isinstance(outcome, str):
                try:
                    next_claim = session.complete_and_claim(conn, task, outcome, self.claim_next())
                    attempts.succeeded(task)
                    return conn, next_claim
                except AttemptFenced as exc:
                    attempts.fenced(task, exc)
                    session.after_settled(task, conn)
                    return conn, session.claim(conn, self.claim_next())
                except DatabaseError as exc:
                    # The commit itself failed (a deferred constraint, a lost connection):
                    # nothing was committed, so the attempt failed.
                    outcome = exc.__cause__ or exc
        finally:
            self.running.end(task)
        if outcome is None:  # abandoned after its timeout: settled elsewhere, conn ended
            self.connections.discard(conn, replace=False)
            return None, None
        if not self.failures.fail_and_release(task, conn, outcome):
            conn = self.connections.discard(conn)
            if conn is None:
                return None, None
        return conn, session.claim(conn, self.claim_next())

    # Nothing of a single drain outlives its task: no group to wait for or give back.
    def open(self) -> bool:
        return False

    def given_up(self, item: Any) -> None:
        return None
