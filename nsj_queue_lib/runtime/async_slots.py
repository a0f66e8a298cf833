"""Async slots: ``async def`` handlers on an event loop the worker owns.

A worker with an ``async def`` handler (``WorkerBase.has_async_handlers``)
runs these instead of the executor threads (``slots.py``): QUEUE_CONCURRENCY
coroutines take the wake-up tokens the threads would take; each holds a
pooled connection (QUEUE_POOL_SIZE of them, default QUEUE_CONCURRENCY) while
it claims and runs tasks, one commit per task, over the same parts as the
threads' drain (``drain_single.py``):

- the claim, the completion and the failure's record are the same calls (the
  same ``Liveness``, ``attempt.py``, ``failures.py``): same statements, same
  liveness lock, same transaction. The claim and the completion, once per
  task, are awaited on the loop where the liveness has awaitable forms of
  them (PostgreSQL: the wire round trips with the loop waiting on the
  socket); everything else runs in a small thread pool, so the loop never
  waits for the database;
- an ``async def`` handler is awaited on the loop with the driver's async twin
  of that connection (``Driver.async_handler_connection``) inside the task's
  open transaction, so its writes and 'sucesso' commit together; a sync
  handler (one worker may have both) runs in a handler thread on the
  connection itself.

Each task is listed in the running tasks (``running.py``) with its
``TaskContext``, so the lifecycle thread writes its progress, delivers cancel
requests and enforces timeouts; a task given up after its timeout has its
coroutine cancelled once its session was ended (``given_up``). For a sync
handler that frees the coroutine and its slot too: the handler's thread,
which Python cannot stop, is left to finish on its own (it drops the
connection then) and counts as stuck. A watchdog thread logs a handler that
blocks the loop, naming its task.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from nsj_queue_lib.context import running
from nsj_queue_lib.exceptions import (
    AttemptFenced,
    DatabaseError,
    HandlerTransactionError,
    TaskSuspended,
)
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.runtime.attempt import Attempts
from nsj_queue_lib.runtime.failures import Failures
from nsj_queue_lib.runtime.handler_commits import SingleCommits
from nsj_queue_lib.runtime.loop_watchdog import LoopWatchdog
from nsj_queue_lib.runtime.running import ABANDONED, RunningTask

logger = get_logger("executor")

T = TypeVar("T")
HANDLER_CLOSED_CONNECTION = (
    "the handler closed bd_conn; the worker commits the task's transaction on it itself "
    "(return to succeed, raise to roll back), so this attempt counts as failed"
)
UNEXPECTED_ERROR_PAUSE_SECONDS = 1.0


class AsyncSlots:
    """``count`` coroutines on one event loop thread, sharing ``pool_size`` connections."""

    def __init__(
        self,
        attempts: Attempts,
        failures: Failures,
        stop: threading.Event,
        *,
        count: int,
        pool_size: int,
        is_async: Callable[[dict[str, Any]], bool],
        handler_connection: Callable[[Any], Awaitable[Any]],
    ):
        self.attempts = attempts
        self.failures = failures
        self.connections = attempts.connections
        self.running = attempts.running
        self.stop = stop
        self.count = count
        self.queue_name = attempts.queue_name
        self._is_async = is_async
        self._handler_connection = handler_connection
        self._pool_size = pool_size
        self._loop = asyncio.new_event_loop()
        # The one thread the supervisor watches (dead_threads, join).
        self._thread = threading.Thread(
            target=self._loop_main, name="nsj-async-executor", daemon=True
        )
        # Database calls: at most one per coroutine holding a connection.
        self._blocking = ThreadPoolExecutor(pool_size, thread_name_prefix="nsj-async-db")
        # Sync handlers, with room for the threads of handlers given up after their timeout
        # (the worker exits once more than QUEUE_CONCURRENCY of those are stuck).
        self._handler_threads = ThreadPoolExecutor(
            pool_size + count, thread_name_prefix="nsj-async-handler"
        )
        self._tokens = 0
        self._idle: collections.deque[asyncio.Future[None]] = collections.deque()
        self._twins: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        # Coroutine -> the task whose async handler it awaits (for the watchdog).
        self._handling: dict[asyncio.Task[Any], int] = {}
        # Coroutine -> the task whose sync handler it waits for (to cancel when given up).
        self._waiting: dict[asyncio.Task[Any], int] = {}
        self._watchdog = LoopWatchdog(self._loop, self._blocking_tasks, stop, self.queue_name)

    @property
    def _awaitable(self) -> bool:
        """Whether the liveness has awaitable claim and completion (not the measured or the
        1.2.2-compatible one: their calls run in threads)."""
        return bool(getattr(self.attempts.liveness, "awaitable", False))

    def claim_next(self) -> bool:
        return not self.stop.is_set()

    # -- from other threads --

    def start(self) -> None:
        self._thread.start()

    def wake(self, count: int = 1) -> None:
        self._soon(self._give_tokens, count)

    def interrupt(self) -> None:
        self._soon(self._release_idle, len(self._idle) + self.count)

    def _soon(self, callback: Callable[[int], None], count: int) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, count)
        except RuntimeError:  # the loop is closed: the executor has stopped
            pass

    def busy(self) -> int:
        """Coroutines claiming or running tasks (not waiting for a wake-up)."""
        if not self._thread.is_alive():
            return 0
        return self.count - len(self._idle)

    def threads(self) -> list[threading.Thread]:
        return [self._thread]

    def dead_threads(self) -> list[threading.Thread]:
        if self.stop.is_set() or not self._thread.ident or self._thread.is_alive():
            return []
        return [self._thread]

    def _blocking_tasks(self) -> list[int]:
        """The tasks whose handler may be blocking the loop (for the watchdog)."""
        handling = dict(self._handling)
        current = asyncio.current_task(self._loop)
        if current is not None and current in handling:
            return [handling[current]]
        return sorted(handling.values())

    def join(self, timeout: float) -> None:
        if self._thread.ident is not None:
            self._thread.join(max(0.0, timeout))
            return
        # Never started: the worker was refused at start.
        self._blocking.shutdown(wait=False)
        self._handler_threads.shutdown(wait=False)
        self._loop.close()

    def leave_behind(self, item: RunningTask) -> list[threading.Thread]:
        """Under the running tasks' lock. The abandoned task's coroutine keeps its connection
        until its session was ended (``given_up``): closed earlier, the session could not be
        ended from outside. A sync handler's thread is stuck until it returns."""
        if item.thread_id == self._thread.ident:
            return []
        return [t for t in threading.enumerate() if t.ident == item.thread_id]

    def given_up(self, item: RunningTask) -> None:
        """The abandoned handler's coroutine is cancelled now (an ``async def`` handler at its
        ``await``; for a sync one, the coroutine waiting for its thread), freeing its slot."""
        self._soon(self._cancel_handler, item.task.id)

    # -- the loop (all below runs on the loop's thread) --

    def _loop_main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._watchdog.start()
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._blocking.shutdown(wait=False, cancel_futures=True)
            self._handler_threads.shutdown(wait=False, cancel_futures=True)
            self._loop.close()

    async def _main(self) -> None:
        self._connection_slots = asyncio.Semaphore(self._pool_size)
        await asyncio.gather(*(self._worker() for _ in range(self.count)))

    def _give_tokens(self, count: int) -> None:
        self._tokens = min(self.count, self._tokens + count)
        self._release_idle(count)

    def _release_idle(self, count: int) -> None:
        while count > 0 and self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    def _wake_one_idle(self) -> None:
        if self._idle and self._tokens == 0:
            self._give_tokens(1)

    async def _take_token(self) -> bool:
        while self._tokens == 0 and not self.stop.is_set():
            waiter = self._loop.create_future()
            self._idle.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._idle:
                    self._idle.remove(waiter)
        if self.stop.is_set():
            return False
        self._tokens -= 1
        return True

    async def _call(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in the thread pool (database calls, sync handlers)."""
        return await self._loop.run_in_executor(self._blocking, functools.partial(function, *args))

    async def _worker(self) -> None:
        while await self._take_token():
            try:
                async with self._connection_slots:
                    await self._drain()
            except Exception:  # a coroutine must never end silently
                logger.exception(
                    "queue=%s: unexpected error in the async executor", self.queue_name
                )
                await asyncio.sleep(UNEXPECTED_ERROR_PAUSE_SECONDS)

    async def _adopt(self, conn: Any) -> None:
        """Make ``conn``'s async twin while ``conn`` is idle (once per connection)."""
        if conn not in self._twins:
            self._twins[conn] = await self._handler_connection(conn)

    async def _drain(self) -> None:
        """Claim and run tasks until none is ready or the worker stops (as a thread's)."""
        try:
            conn = await self._call(self.connections.pool.getconn)
        except Exception as exc:  # noqa: BLE001 - pool timeout: database unreachable
            logger.warning(
                "queue=%s: no database connection for an executor (%s)", self.queue_name, exc
            )
            return
        with self.running.draining():
            try:
                await self._adopt(conn)
                claimed = await self._claim(conn)
                while claimed is not None:
                    self._wake_one_idle()
                    conn, claimed = await self._run(conn, claimed)
            except DatabaseError as exc:
                logger.warning("queue=%s: %s", self.queue_name, exc)
                conn = await self._call(self.connections.discard, conn, False)
            except Exception as exc:  # noqa: BLE001 - the lock server is unreachable: claim again when woken
                logger.warning("queue=%s: claim abandoned: %s", self.queue_name, exc)
            finally:
                await self._call(self.connections.put_back, conn)

    async def _run(self, conn: Any, claimed: Claim) -> tuple[Any, Claim | None]:
        """Run one claimed task; (the connection to go on with, the next claimed task)."""
        attempts = self.attempts
        if not self._awaitable and attempts.transaction_gone(conn):
            # MySQL's threaded connection (on Galera a replicated write can abort it); an
            # awaitable PostgreSQL session loses its transaction only with its connection.
            return await self._call(
                attempts.give_back_unstarted, conn, claimed.task, self.claim_next()
            )
        item = attempts.start(conn, claimed)
        task = item.task
        asynchronous = self._is_async(task.row)
        try:
            if asynchronous:
                outcome = await self._call_async_handler(item)
            else:
                # Durable steps and waits commit on the handler's (sync) connection, in its
                # thread (runtime/handler_commits.py); async handlers have none.
                item.context.commits = SingleCommits(attempts.session, conn, task)
                outcome = await self._call_sync_handler(item)
            if outcome is not None and item.context.progress is not None:
                await self._call(attempts.after_handler, item.context)  # its last progress
            if isinstance(outcome, TaskSuspended):  # committed 'pendente' by a durable wait
                attempts.suspended(task, outcome)
                await self._call(attempts.session.after_settled, task, conn)
                return conn, await self._claim(conn)
            if isinstance(outcome, str):
                try:
                    return conn, await self._complete(conn, task, outcome)
                except AttemptFenced as exc:  # rolled back: its new attempt runs elsewhere
                    attempts.fenced(task, exc)
                    await self._call(attempts.session.after_settled, task, conn)
                    return conn, await self._claim(conn)
                except DatabaseError as exc:
                    outcome = exc.__cause__ or exc  # the commit failed: the attempt failed
        finally:
            self.running.end(task)
        if outcome is None:  # abandoned after its timeout: settled elsewhere, session ended
            if asynchronous:  # a sync handler's thread drops the connection (_sync_handler)
                await self._call(self.connections.discard, conn, False)
            return None, None
        return await self._after_failure(conn, task, outcome)

    async def _call_sync_handler(self, item: RunningTask) -> str | BaseException | None:
        """Run a sync handler in a handler thread; None as soon as it was given up after its
        timeout, even while its thread still runs."""
        me = asyncio.current_task()
        assert me is not None
        self._waiting[me] = item.task.id
        try:
            return await self._loop.run_in_executor(self._handler_threads, self._sync_handler, item)
        except asyncio.CancelledError:
            if item.state != ABANDONED:
                raise  # the loop itself is stopping
            uncancel = getattr(me, "uncancel", None)  # as in _call_async_handler
            if uncancel is not None:
                uncancel()
            return None
        finally:
            self._waiting.pop(me, None)

    def _sync_handler(self, item: RunningTask) -> str | BaseException | None:
        """In a handler thread: the handler; when it was given up meanwhile, this thread (the
        only one that may still use the connection) drops the connection."""
        item.thread_id = threading.get_ident()
        outcome = self.attempts.call_handler(item)
        if outcome is None:
            self.connections.discard(item.conn, replace=False)
            self.running.unstick(threading.current_thread())  # a pool thread: it lives on
        return outcome

    async def _call_async_handler(self, item: RunningTask) -> str | BaseException | None:
        """Await an ``async def`` handler on the loop, its task current inside the coroutine."""
        attempts = self.attempts
        task, conn = item.task, item.conn
        twin = self._twins[conn]
        # The sync connection of the same session: parents() and spawn() are sync calls.
        item.context.bd_conn, item.context.queue_table = conn, attempts.session.store.queue_table
        me = asyncio.current_task()
        assert me is not None
        self._handling[me] = task.id
        try:
            with running(item.context):
                # An async handler's call returns its coroutine (WorkerBase.handle_task).
                result = await cast(Awaitable[Any], attempts.handler(task.row, twin))
            if getattr(twin, "closed", False):
                raise HandlerTransactionError(HANDLER_CLOSED_CONNECTION)
            outcome: str | BaseException = attempts.success_message(conn, result)
        except asyncio.CancelledError as exc:
            if item.state != ABANDONED:
                raise  # the loop itself is stopping
            # Only the handler was cancelled (given_up): this coroutine goes on.
            uncancel = getattr(me, "uncancel", None)  # Python 3.11+ counts cancellations
            if uncancel is not None:
                uncancel()
            outcome = exc
        except BaseException as exc:  # noqa: BLE001 - SystemExit and the like fail the task too
            outcome = attempts.handler_error(task, exc)
        finally:
            self._handling.pop(me, None)
        return attempts.handler_done(item, outcome)

    def _cancel_handler(self, task_id: int) -> None:
        for coroutines in (self._handling, self._waiting):
            for coroutine, handled in list(coroutines.items()):
                if handled == task_id:
                    coroutine.cancel()

    async def _claim(self, conn: Any) -> Claim | None:
        liveness: Any = self.attempts.liveness  # DatabaseLiveness has the awaitable forms
        if self._awaitable:
            claimed: Claim | None = await liveness.claim_async(conn, self.claim_next())
            return claimed
        return await self._call(self.attempts.session.claim, conn, self.claim_next())

    async def _complete(self, conn: Any, task: TaskRecord, mensagem: str) -> Claim | None:
        """'sucesso', committed with the handler's writes; the next claim."""
        liveness: Any = self.attempts.liveness
        if self._awaitable:
            next_claim = await liveness.complete_and_claim_async(
                conn, task, mensagem, self.claim_next()
            )
        else:
            next_claim = await self._call(
                self.attempts.session.complete_and_claim, conn, task, mensagem, self.claim_next()
            )
        self.attempts.succeeded(task)
        return next_claim

    async def _after_failure(
        self, conn: Any, task: TaskRecord, error: BaseException
    ) -> tuple[Any, Claim | None]:
        healthy = await self._call(self.failures.fail_and_release, task, conn, error)
        if not healthy:
            conn = await self._call(self.connections.discard, conn)
            if conn is None:
                return None, None
            await self._adopt(conn)
        return conn, await self._claim(conn)
