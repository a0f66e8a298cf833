"""The async executor: ``async def`` handlers on an event loop the worker owns.

A worker with an ``async def`` handler (``WorkerBase.has_async_handlers``)
runs this instead of the executor threads. QUEUE_CONCURRENCY coroutines take
the wake-up tokens the threads would take; each holds a pooled connection
(QUEUE_POOL_SIZE of them, default QUEUE_CONCURRENCY) while it claims and runs
tasks, as a thread does:

- claim, completion and failure recording are the sync executor's own calls
  (the same ``Liveness``, store and ``_fail``): same statements, same liveness
  lock, same session, same transaction. The claim and the completion, once per
  task, are awaited on the loop where the store has awaitable forms of them
  (PostgreSQL: the wire round trips with the loop waiting on the socket);
  everything else runs in a small thread pool, so the loop never waits for the
  database;
- an ``async def`` handler is awaited on the loop with the driver's async twin
  of that connection (``Driver.async_handler_connection``) inside the task's
  open transaction, so its writes and 'sucesso' commit together; a sync
  handler (one worker may have both) runs in a handler thread on the
  connection itself.

The task life cycle is the sync executor's: each task is listed in
``running_tasks()`` with its ``TaskContext`` (``current_task()`` inside the
coroutine), so the lifecycle thread writes its progress, delivers cancel
requests and enforces timeouts; a task given up after its timeout has its
coroutine cancelled once its session was ended (``given_up``). For a sync
handler that frees the coroutine and its slot too: the handler's thread,
which Python cannot stop, is left to finish on its own (it drops the
connection then) and counts as stuck, as an abandoned executor thread does.

A watchdog thread logs a handler that blocks the loop, naming its task.
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
from nsj_queue_lib.db.driver import ConnectionPool
from nsj_queue_lib.db.queue_store import WorkerStore
from nsj_queue_lib.exceptions import AttemptFenced, DatabaseError, HandlerTransactionError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.observability.observer import NULL_OBSERVER, Observer
from nsj_queue_lib.retry_policy import RetryPolicies
from nsj_queue_lib.runtime.executor import (
    ABANDONED,
    RunningTask,
    SessionTerminator,
    TaskExecutor,
    TaskHandler,
)
from nsj_queue_lib.runtime.infrastructure import ConnectionLost
from nsj_queue_lib.runtime.liveness import Liveness
from nsj_queue_lib.runtime.loop_watchdog import LoopWatchdog
from nsj_queue_lib.settings import Settings

logger = get_logger("executor")

T = TypeVar("T")
HANDLER_CLOSED_CONNECTION = (
    "the handler closed bd_conn; the worker commits the task's transaction on it itself "
    "(return to succeed, raise to roll back), so this attempt counts as failed"
)
UNEXPECTED_ERROR_PAUSE_SECONDS = 1.0


class AsyncTaskExecutor(TaskExecutor):
    """``queue_concurrency`` coroutines on one event loop thread, sharing a connection pool."""

    def __init__(
        self,
        settings: Settings,
        store: WorkerStore,
        pool: ConnectionPool,
        handler: TaskHandler,
        stop: threading.Event,
        liveness: Liveness,
        terminate_session: SessionTerminator,
        *,
        is_async: Callable[[dict[str, Any]], bool],
        handler_connection: Callable[[Any], Awaitable[Any]],
        policies: RetryPolicies | None = None,
        observer: Observer = NULL_OBSERVER,
        connection_lost: ConnectionLost | None = None,
    ):
        super().__init__(
            settings,
            store,
            pool,
            handler,
            stop,
            liveness,
            terminate_session,
            policies=policies,
            observer=observer,
            connection_lost=connection_lost,
        )
        self._is_async = is_async
        self._handler_connection = handler_connection
        self._pool_size = settings.async_pool_size
        self._loop = asyncio.new_event_loop()
        # The one thread the supervisor watches (dead_threads, join).
        self._threads = [
            threading.Thread(target=self._loop_main, name="nsj-async-executor", daemon=True)
        ]
        # Database calls: at most one per coroutine holding a connection.
        self._blocking = ThreadPoolExecutor(self._pool_size, thread_name_prefix="nsj-async-db")
        # Sync handlers, with room for the threads of handlers given up after their timeout
        # (the worker exits once more than QUEUE_CONCURRENCY of those are stuck).
        self._handler_threads = ThreadPoolExecutor(
            self._pool_size + settings.queue_concurrency, thread_name_prefix="nsj-async-handler"
        )
        self._idle: collections.deque[asyncio.Future[None]] = collections.deque()
        self._twins: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        # Coroutine -> the task whose async handler it awaits (for the watchdog).
        self._handling: dict[asyncio.Task[Any], int] = {}
        # Coroutine -> the task whose sync handler it waits for (to cancel when given up).
        self._waiting: dict[asyncio.Task[Any], int] = {}
        self._watchdog = LoopWatchdog(self._loop, self._blocking_tasks, stop, settings.queue_name)

    @property
    def _awaitable(self) -> bool:
        """Whether the liveness has awaitable claim and completion (not the measured or the
        1.2.2-compatible one, which can replace it at start: their calls run in threads)."""
        return bool(getattr(self.liveness, "awaitable", False))

    # -- wake-ups (from other threads) --

    def wake(self, count: int = 1) -> None:
        self._soon(self._give_tokens, count)

    def interrupt(self) -> None:
        self._soon(self._release_idle, len(self._idle) + self.settings.queue_concurrency)

    def _soon(self, callback: Callable[[int], None], count: int) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, count)
        except RuntimeError:  # the loop is closed: the executor has stopped
            pass

    # -- observation --

    def busy_threads(self) -> int:
        """Coroutines claiming or running tasks (not waiting for a wake-up)."""
        if not self._threads[0].is_alive():
            return 0
        return self.settings.queue_concurrency - len(self._idle)

    def _blocking_tasks(self) -> list[int]:
        """The tasks whose handler may be blocking the loop (for the watchdog)."""
        handling = dict(self._handling)
        current = asyncio.current_task(self._loop)
        if current is not None and current in handling:
            return [handling[current]]
        return sorted(handling.values())

    def join(self, timeout: float) -> None:
        super().join(timeout)
        if self._threads[0].ident is None:  # never started: the worker was refused at start
            self._blocking.shutdown(wait=False)
            self._handler_threads.shutdown(wait=False)
            self._loop.close()

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
        self._connections = asyncio.Semaphore(self._pool_size)
        await asyncio.gather(*(self._worker() for _ in range(self.settings.queue_concurrency)))

    def _give_tokens(self, count: int) -> None:
        self._tokens = min(self.settings.queue_concurrency, self._tokens + count)
        self._release_idle(count)

    def _release_idle(self, count: int) -> None:
        while count > 0 and self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    def _wake_idle_thread(self) -> None:
        if self._idle and self._tokens == 0:
            self._give_tokens(1)

    async def _take_token_async(self) -> bool:
        while self._tokens == 0 and not self.stop_event.is_set():
            waiter = self._loop.create_future()
            self._idle.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._idle:
                    self._idle.remove(waiter)
        if self.stop_event.is_set():
            return False
        self._tokens -= 1
        return True

    async def _call(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in the thread pool (database calls, sync handlers)."""
        return await self._loop.run_in_executor(self._blocking, functools.partial(function, *args))

    async def _worker(self) -> None:
        while await self._take_token_async():
            try:
                async with self._connections:
                    await self._drain_async()
            except Exception:  # a coroutine must never end silently
                logger.exception(
                    "queue=%s: unexpected error in the async executor", self.settings.queue_name
                )
                await asyncio.sleep(UNEXPECTED_ERROR_PAUSE_SECONDS)

    async def _adopt(self, conn: Any) -> None:
        """Make ``conn``'s async twin while ``conn`` is idle (once per connection)."""
        if conn not in self._twins:
            self._twins[conn] = await self._handler_connection(conn)

    async def _drain_async(self) -> None:
        """Claim and run tasks until none is ready or the worker stops (as ``_drain``)."""
        try:
            conn = await self._call(self.pool.getconn)
        except Exception as exc:  # noqa: BLE001 - pool timeout: database unreachable
            logger.warning(
                "queue=%s: no database connection for an executor (%s)",
                self.settings.queue_name,
                exc,
            )
            return
        with self.draining():
            try:
                await self._adopt(conn)
                claimed = await self._claim(conn)
                while claimed is not None:
                    self._wake_idle_thread()
                    conn, claimed = await self._run_async(conn, claimed)
            except DatabaseError as exc:
                logger.warning("queue=%s: %s", self.settings.queue_name, exc)
                conn = await self._call(self._discard, conn, False)
            except Exception as exc:  # noqa: BLE001 - the lock server is unreachable: claim again when woken
                logger.warning("queue=%s: claim abandoned: %s", self.settings.queue_name, exc)
            finally:
                await self._call(self._put_back, conn)

    async def _run_async(self, conn: Any, claimed: Claim) -> tuple[Any, Claim | None]:
        """Run one claimed task; (the connection to go on with, the next claimed task)."""
        if not self._awaitable and self._transaction_gone(conn):
            # MySQL's threaded connection (on Galera a replicated write can abort it); an
            # awaitable PostgreSQL session loses its transaction only with its connection.
            return await self._call(self._give_back_unstarted, conn, claimed.task)
        item = self._started(conn, claimed)
        task = item.task
        asynchronous = self._is_async(task.row)
        try:
            if asynchronous:
                outcome = await self._call_async_handler(item)
            else:
                outcome = await self._call_sync_handler(item)
            if outcome is not None and item.context.progress is not None:
                await self._call(self.after_handler, item.context)  # its last progress
            if isinstance(outcome, str):
                try:
                    return conn, await self._complete(conn, task, outcome)
                except AttemptFenced as exc:  # rolled back: its new attempt runs elsewhere
                    self.fenced(task, exc)
                    await self._call(self.liveness.after_settled, task, conn)
                    return conn, await self._claim(conn)
                except DatabaseError as exc:
                    outcome = exc.__cause__ or exc  # the commit failed: the attempt failed
        finally:
            self._ended(task)
        if outcome is None:  # abandoned after its timeout: settled elsewhere, session ended
            if asynchronous:  # a sync handler's thread drops the connection (_sync_handler)
                await self._call(self._discard, conn, False)
            return None, None
        return await self._after_failure(conn, task, outcome)

    async def _call_sync_handler(self, item: RunningTask) -> str | BaseException | None:
        """Run a sync handler in a handler thread (``_call_handler``'s outcomes); None as soon
        as it was given up after its timeout, even while its thread still runs."""
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
        outcome = self._call_handler(item)
        if outcome is None:
            self._discard(item.conn, replace=False)
            with self._cond:  # a pool thread: it lives on, no longer stuck
                self._stuck = [t for t in self._stuck if t is not threading.current_thread()]
        return outcome

    async def _call_async_handler(self, item: RunningTask) -> str | BaseException | None:
        """Await an ``async def`` handler on the loop, its task current inside the coroutine
        (``_call_handler``'s outcomes)."""
        task, conn = item.task, item.conn
        twin = self._twins[conn]
        me = asyncio.current_task()
        assert me is not None
        self._handling[me] = task.id
        try:
            with running(item.context):
                # An async handler's call returns its coroutine (WorkerBase.handle_task).
                result = await cast(Awaitable[Any], self.handler(task.row, twin))
            if getattr(twin, "closed", False):
                raise HandlerTransactionError(HANDLER_CLOSED_CONNECTION)
            outcome: str | BaseException = self._success_message(conn, result)
        except asyncio.CancelledError as exc:
            if item.state != ABANDONED:
                raise  # the loop itself is stopping
            # Only the handler was cancelled (_leave_behind): this coroutine goes on.
            uncancel = getattr(me, "uncancel", None)  # Python 3.11+ counts cancellations
            if uncancel is not None:
                uncancel()
            outcome = exc
        except BaseException as exc:  # noqa: BLE001 - SystemExit and the like fail the task too
            outcome = self._handler_error(task, exc)
        finally:
            self._handling.pop(me, None)
        return self._handler_done(item, outcome)

    def _leave_behind(self, item: RunningTask) -> None:
        """Under the lock. The abandoned task's coroutine keeps its connection until its
        session was ended (``given_up``): closed earlier, the session could not be ended from
        outside. A sync handler's thread is counted as stuck until it returns."""
        if item.thread_id != self._threads[0].ident:
            self._stuck.extend(t for t in threading.enumerate() if t.ident == item.thread_id)

    def given_up(self, item: RunningTask) -> None:
        """The abandoned handler's coroutine is cancelled now (an ``async def`` handler at its
        ``await``; for a sync one, the coroutine waiting for its thread), freeing its slot."""
        self._soon(self._cancel_handler, item.task.id)

    def _cancel_handler(self, task_id: int) -> None:
        for coroutines in (self._handling, self._waiting):
            for coroutine, handled in list(coroutines.items()):
                if handled == task_id:
                    coroutine.cancel()

    async def _claim(self, conn: Any) -> Claim | None:
        liveness: Any = self.liveness  # DatabaseLiveness has the awaitable forms
        if self._awaitable:
            claimed: Claim | None = await liveness.claim_async(conn, self._claim_next())
            return claimed
        return await self._call(liveness.claim, conn, self._claim_next())

    async def _complete(self, conn: Any, task: TaskRecord, mensagem: str) -> Claim | None:
        """'sucesso', committed with the handler's writes; the next claim."""
        liveness: Any = self.liveness
        if self._awaitable:
            next_claim = await liveness.complete_and_claim_async(
                conn, task, mensagem, self._claim_next()
            )
        else:
            next_claim = await self._call(
                liveness.complete_and_claim, conn, task, mensagem, self._claim_next()
            )
        self._succeeded(task)
        return next_claim

    async def _after_failure(
        self, conn: Any, task: TaskRecord, error: BaseException
    ) -> tuple[Any, Claim | None]:
        healthy = await self._call(self._fail_and_release, task, conn, error)
        if not healthy:
            conn = await self._call(self._discard, conn)
            if conn is None:
                return None, None
            await self._adopt(conn)
        return conn, await self._claim(conn)
