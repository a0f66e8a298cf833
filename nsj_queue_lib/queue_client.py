"""QueueClient: enqueue tasks inside the caller's own transaction.

The client never opens a connection, and never commits or rolls back a transaction
of its caller's: a task exists exactly when the caller's transaction commits. On a
connection in autocommit mode, a call that writes with several statements runs in
one transaction of its own (db/own_transaction.py). Table names are checked when
the client is built and every argument before any row is read or written.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from nsj_queue_lib import model
from nsj_queue_lib.db.driver import client_inspection_store, client_store
from nsj_queue_lib.db.own_transaction import own_transaction
from nsj_queue_lib.db.pause_store import BreakerStore, PauseStore
from nsj_queue_lib.db.queue_store import StreamingClientStore
from nsj_queue_lib.db.workflow_store import WorkflowStore, WorkflowUnsupported
from nsj_queue_lib.dbapi import DBConnection
from nsj_queue_lib.exceptions import NotFoundError
from nsj_queue_lib.identifiers import check_table_name
from nsj_queue_lib.observability.trace_context import capture
from nsj_queue_lib.payload import payload_hash, serialize_payload
from nsj_queue_lib.process.ids import CALL, REPAIR, check_process_id
from nsj_queue_lib.task_rows import bulk_row, task_row, unkeyed
from nsj_queue_lib.task_views import task_view
from nsj_queue_lib.workflow.dependencies import (
    check_after,
    insert_child,
    parents_failed,
    read_parents,
)
from nsj_queue_lib.workflow.waiting import wait_for, wait_pushed
from nsj_queue_lib.workflow.waits import send_event

if TYPE_CHECKING:
    from nsj_queue_lib.settings import Settings

DEFAULT_EQUIVALENT_STATUSES = (model.SUCESSO, model.PENDENTE, model.AGENDADA)
Method = TypeVar("Method", bound=Callable[..., Any])


def _atomic(method: Method) -> Method:
    """A call that may write with several statements: on a connection in autocommit mode,
    they run in one transaction of their own (db/own_transaction.py)."""

    @functools.wraps(method)
    def call(self: QueueClient, *args: Any, **kwargs: Any) -> Any:
        with own_transaction(self._conn):
            return method(self, *args, **kwargs)

    return cast(Method, call)


class QueueClient:
    def __init__(
        self,
        bd_conn: DBConnection,
        queue_table: str,
        queue_subscriber_table: str | None = None,
        *,
        trace_context: bool = True,
    ) -> None:
        """``trace_context``: store the current OpenTelemetry span's context with each task
        (docs/integrations/opentelemetry.md); nothing is stored without an active span."""
        check_table_name(queue_table, "queue table")
        if queue_subscriber_table is not None:
            check_table_name(queue_subscriber_table, "subscriber table")
        self._conn = bd_conn
        self._store = client_store(bd_conn, queue_table, queue_subscriber_table)
        self.queue_table = queue_table
        self.queue_subscriber_table = queue_subscriber_table
        self._capture = capture if trace_context else _no_trace_context
        self._workflow_store: WorkflowStore | None = None

    # -- enqueue --

    def insert_task(
        self,
        origem: str,
        destino: str,
        processo: str,
        chave_externa: str,
        payload: Any,
        tenant: int | None = None,
        grupo_empresarial: str | None = None,
        data_hora: datetime.datetime | None = None,
        prioridade: int | None = None,
        *,
        dedupe_key: str | None = None,
        lock_key: str | None = None,
        max_retry: int | None = None,
        timeout_s: float | None = None,
        next_try_priority: int | None = None,
        fair_key: str | None = None,
        partition_key: str | None = None,
        after: Sequence[int] | None = None,
        on_parent_failure: str = "cancel",
        process_id: str | None = None,
    ) -> int:
        """Enqueue one task; returns its id.

        With ``dedupe_key``, while a task with that key is unfinished (waiting,
        running or due for a retry) nothing is written and that task's
        ``id_inicial`` is returned. Tasks with equal ``lock_key`` never run at
        the same time and start in claim order (docs/flow-control.md).
        ``max_retry``, ``timeout_s`` and ``next_try_priority`` (the prioridade of its
        retries) override the ``@Task`` options and the queue's defaults for this task
        (docs/fleet-control.md). Among ready tasks of equal ``prioridade``, claims
        rotate across ``fair_key`` values (fair shares, docs/fleet-control.md);
        ``partition_key`` is its alias (seed 000's name).

        With ``after`` (task ids), the task is 'aguardando' until every one of
        them ends 'sucesso'; a parent dead-lettered or cancelled cancels it, or,
        with ``on_parent_failure="run"``, counts as finished
        (docs/how-to/dependencies.md). Unknown ids raise ``NotFoundError`` and
        nothing is written.

        With ``process_id``, the task is a call to that process (as ``call_process``):
        ``NotFoundError`` for an unknown process, ``ProcessCorruptedError`` for a corrupted
        one (docs/how-to/processes.md).
        """
        row = task_row(locals(), pub_sub=False, trace_context=self._capture())
        parents = check_after(after, on_parent_failure)
        if process_id is None and not parents:
            return self._store.insert_task(self._conn, row)
        if process_id is None:
            with own_transaction(self._conn):
                return self._insert_row(row, parents, on_parent_failure)
        from nsj_queue_lib.process import client as processes

        process_id = check_process_id(process_id)
        row = processes.with_process_key(row, process_id)  # checked before any SQL is sent
        with own_transaction(self._conn):
            return processes.insert_checked(self, process_id, CALL, row, parents, on_parent_failure)

    def _insert_row(
        self, row: dict[str, Any], parents: list[int] | None, on_parent_failure: str
    ) -> int:
        """Insert one task whose parameters ``task_row`` checked, after ``parents``."""
        if parents:
            return self._insert_after([row], [parents], [on_parent_failure])[0]
        return self._store.insert_task(self._conn, row)

    def _insert_after(
        self,
        rows: Sequence[dict[str, Any]],
        afters: Sequence[list[int] | None],
        modes: Sequence[str],
    ) -> list[int]:
        """Insert ``rows``, each after its tasks in ``afters``: every parent is read (and
        locked) before the first insert, so an unknown id writes nothing."""
        if any(row["dedupe_key"] is not None for row in rows):
            raise ValueError("after= and dedupe_key cannot be combined")
        wstore = self._workflow()
        parents = [read_parents(wstore, self._conn, after) if after else [] for after in afters]
        ids = []
        # Stores that can write a row 'aguardando' in its INSERT (PostgreSQL's); the others'
        # children are inserted, then set waiting.
        insert_waiting = getattr(self._store, "insert_waiting_task", None)
        for row, read, mode in zip(rows, parents, modes, strict=True):
            insert = functools.partial(self._store.insert_task, self._conn, row)
            if not read:
                ids.append(insert())
                continue
            waiting = insert_waiting and functools.partial(insert_waiting, self._conn, row)
            ids.append(insert_child(wstore, self._conn, insert, read, mode, waiting))
        return ids

    def insert_task_pub_sub(
        self,
        origem: str,
        destino: str,
        processo: str,
        chave_externa: str,
        payload: Any,
        tenant: int | None = None,
        grupo_empresarial: str | None = None,
        data_hora: datetime.datetime | None = None,
        prioridade: int | None = None,
    ) -> int:
        """Enqueue a publication: a worker turns it into one task per matching subscriber."""
        row = task_row(locals(), pub_sub=True, trace_context=self._capture())
        return self._store.insert_task(self._conn, row)

    def insert_task_webhook(
        self,
        origem: str,
        destino: str,
        processo: str,
        chave_externa: str,
        payload: Any,
        tenant: int | None = None,
        grupo_empresarial: str | None = None,
        data_hora: datetime.datetime | None = None,
        prioridade: int | None = None,
    ) -> int:
        """Enqueue a publication delivered to the subscribers' webhook URLs."""
        row = task_row(locals(), pub_sub=True, trace_context=self._capture())
        return self._store.insert_task(self._conn, row)

    @_atomic
    def insert_tasks(self, tasks: Iterable[Mapping[str, Any]]) -> list[int]:
        """Enqueue many tasks in one round trip; returns their ids in the given order.

        Each item is a mapping with the arguments of ``insert_task`` (by
        name) and optionally ``pub_sub``. Every item is checked before any SQL
        is sent, so one bad item writes nothing.
        """
        if isinstance(tasks, (str, bytes, Mapping)):
            raise TypeError("insert_tasks expects an iterable of task mappings")
        items = list(tasks)
        store = self._store
        # One trace context for the call: its tasks are enqueued by the same span.
        checked_row = functools.partial(bulk_row, trace_context=self._capture())
        if (
            isinstance(store, StreamingClientStore)
            and store.streams(self._conn, len(items))
            and unkeyed(items)
        ):
            # Rows are checked while the earlier ones travel (the store undoes the
            # insert when one fails the checks), so client and server work at once.
            return store.stream_tasks(
                self._conn, len(items), map(checked_row, range(len(items)), items)
            )
        rows = [checked_row(index, task) for index, task in enumerate(items)]
        if any(task.get("after") for task in items):
            modes = [task.get("on_parent_failure", "cancel") for task in items]
            afters = [
                check_after(task.get("after"), mode)
                for task, mode in zip(items, modes, strict=True)
            ]
            return self._insert_after(rows, afters, modes)
        if any(row["dedupe_key"] is not None or row["lock_key"] is not None for row in rows):
            # Each keyed insert may find its dedupe_key taken: one statement per task.
            return [self._store.insert_task(self._conn, row) for row in rows]
        # Tasks with overrides or fair keys: the store names their columns (and stamps the
        # fair keys' turns, fleet/fair.py).
        return self._store.insert_tasks(self._conn, rows)

    # -- query --

    def list_equivalent_task(
        self,
        origem: str,
        destino: str,
        processo: str,
        chave_externa: str,
        payload: Any,
        tenant: int | None = None,
        grupo_empresarial: str | None = None,
        status: Sequence[str] = DEFAULT_EQUIVALENT_STATUSES,
    ) -> list[dict[str, Any]]:
        """Tasks already in the queue with the same key, payload and fields, in the given statuses."""
        if isinstance(status, str):
            status = (status,)
        statuses = list(status)
        bad = [s for s in statuses if s not in model.STATUSES]
        if bad or not statuses:
            raise ValueError(
                f"status must be a non-empty list of {model.STATUSES}, got {list(status)!r}"
            )
        try:
            text = serialize_payload(payload)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        rows = self._store.list_equivalent(self._conn, chave_externa, payload_hash(text), statuses)
        return [
            row
            for row in rows
            if row["origem"] == origem
            and row["destino"] == destino
            and row["processo"] == processo
            and row["tenant"] == tenant
            and (row["grupo_empresarial"] or None) == (grupo_empresarial or None)
        ]

    # -- a task's life cycle (docs/lifecycle.md) --

    def get_task(self, task_id: int) -> dict[str, Any] | None:
        """The task ``task_id`` (any attempt's id) as a user sees it, or None when unknown.

        ``id_inicial``, ``id`` (its latest attempt), that attempt's ``status``,
        ``tentativa`` and ``mensagem``, ``cancel_requested`` and ``progress``
        (``{"done", "total", "message"}``, or None when the attempt reported none).
        """
        row = self._store.task_view(self._conn, _task_id(task_id))
        return None if row is None else task_view(row)

    @_atomic
    def cancel_task(self, task_id: int) -> str:
        """Cancel the task ``task_id`` (any attempt's id); returns its status after the call.

        A waiting task ('pendente', 'agendada') becomes 'cancelada' and never runs;
        a running one is asked to stop ('processando' is returned; its worker sees
        the request within 2 s of the commit); a finished task is left as it is.
        In the caller's transaction. ``NotFoundError`` for an unknown id.
        """
        task_id = _task_id(task_id)
        for _ in range(CANCEL_ATTEMPTS):
            latest = self._store.task_view(self._conn, task_id, lock=True)
            if latest is None:
                raise NotFoundError(f"task {task_id} not found in {self.queue_table}")
            if latest["status"] not in model.ACTIVE_STATUSES:
                if latest["reenfileirado"]:
                    continue  # its next attempt was being inserted: look again
                return str(latest["status"])
            status = self._store.cancel_attempt(self._conn, latest["id"], CANCELLED_MESSAGE)
            if status == model.PROCESSANDO:
                self._store.notify_cancel(self._conn, latest["id"])
            elif status == model.CANCELADA:
                self._cancel_children(latest["id"])
            if status is not None:
                return status
            # The attempt settled meanwhile (ran, failed, was claimed): look again.
        raise RuntimeError(f"task {task_id} kept changing; cancel it again")

    def wait_for_task(
        self, task_id: int, timeout_s: float, *, server: Settings | None = None
    ) -> dict[str, Any]:
        """``get_task``'s dict once the task ``task_id`` has finished ('sucesso',
        'cancelada', or failed with no attempt left); ``TimeoutError`` when it has not
        within ``timeout_s`` seconds, ``NotFoundError`` for an unknown id. Call it outside
        any open transaction (after the insert's commit). On PostgreSQL it LISTENs on the
        connection for the end trigger's NOTIFY (UNLISTEN after); inside a transaction,
        and on MySQL/MariaDB, it polls the latest committed state; on MySQL/MariaDB each
        look is its own transaction, which it ends, so REPEATABLE READ's snapshot never
        hides the end. ``server``: the settings of a socket server the workers use
        (CLIENT_SERVER_MODE): on MySQL/MariaDB a wait that lasts is then pushed through it
        (workflow/server_ends.py; docs/how-to/wait-for-a-task.md)."""
        task_id = _task_id(task_id)
        waiter = self._store.end_waiter(self._conn, task_id)
        if waiter is not None:  # PostgreSQL, an idle connection: the end trigger's NOTIFY
            view = functools.partial(self._store.task_view, self._conn, task_id)
            return task_view(wait_pushed(view, waiter, task_id, timeout_s))
        try:
            own_transactions = self._workflow().fresh_looks(self._conn)
        except WorkflowUnsupported:
            own_transactions = False

        def look() -> Mapping[str, Any] | None:
            if own_transactions:
                # Ends a transaction that only read (its snapshot would hide the end);
                # each look then reads in a transaction of its own.
                self._conn.rollback()
            return self._store.task_view(self._conn, task_id)

        try:
            if server is not None and server.client_server_mode:
                from nsj_queue_lib.workflow.server_ends import ServerEndWaiter

                waiter = ServerEndWaiter.open(server, self.queue_table, look)
                return task_view(wait_pushed(look, waiter, task_id, timeout_s))
            return task_view(wait_for(look, task_id, timeout_s))
        finally:
            if own_transactions:
                self._conn.rollback()

    def get_workflow(self, workflow_id: int) -> dict[str, Any] | None:
        """The workflow ``workflow_id`` (what ``Workflow.enqueue`` returned), or None when
        unknown: ``id``, ``name``, ``created_at``, ``status`` ('running', 'succeeded',
        'failed', 'cancelled': derived from its tasks), ``counts`` (tasks per status) and
        ``tasks`` (each ``get_task``'s dict with ``processo``, ``chave_externa`` and
        ``parents``, in the order added). docs/how-to/workflows.md."""
        from nsj_queue_lib.workflow.view import get_workflow

        return get_workflow(self, _task_id(workflow_id))

    @_atomic
    def cancel_workflow(self, workflow_id: int) -> dict[int, str]:
        """Cancel the workflow's unfinished tasks as ``cancel_task`` does (waiting ones become
        'cancelada', running ones are asked to stop), in the caller's transaction; returns
        ``{task id: status after the call}``. ``NotFoundError`` for an unknown id."""
        from nsj_queue_lib.workflow.view import cancel_workflow

        return cancel_workflow(self, _task_id(workflow_id))

    @_atomic
    def send_event(self, task_id: int, name: str, payload: Any = None) -> None:
        """Send the event ``name`` (``payload``: a JSON value) to the task ``task_id``, in the
        caller's transaction: kept until the task's ``wait_event(name, ...)`` takes it (an
        event sent before the task waits is kept); a task waiting for it is due at the
        commit (docs/how-to/durable-waits.md). ``NotFoundError`` for an unknown id."""
        send_event(self._conn, self._store, self.queue_table, _task_id(task_id), name, payload)

    # -- process instances (nsj_queue_lib/process/, docs/how-to/processes.md) --

    @_atomic
    def start_process(
        self, process_id: str, processo: str, payload: Any, **insert_options: Any
    ) -> int:
        """Start the process ``process_id`` with a task of ``processo`` (its first); returns
        the task's id. ``ProcessExistsError`` when the id exists (nothing written).
        ``insert_options``: ``insert_task``'s (``tenant``, ``prioridade``, ``max_retry``...;
        a process's tasks share its lock key, so no ``lock_key``)."""
        from nsj_queue_lib.process import client as processes

        return processes.start_process(self, process_id, processo, payload, insert_options)

    @_atomic
    def call_process(
        self, process_id: str, processo: str, payload: Any, **insert_options: Any
    ) -> int:
        """Enqueue a call to the process: a task of ``processo`` that runs after the process's
        earlier tasks, one at a time; returns its id (``wait_for_task`` and
        ``call_response`` give its outcome). ``NotFoundError`` for an unknown process,
        ``ProcessCorruptedError`` while the process is corrupted."""
        from nsj_queue_lib.process import client as processes

        return processes.call_process(self, process_id, processo, payload, insert_options)

    @_atomic
    def repair_process(
        self, process_id: str, processo: str, payload: Any, **insert_options: Any
    ) -> int:
        """Enqueue a repair of the process: a call accepted (and run) even while the process
        is corrupted; its success ends the corruption."""
        from nsj_queue_lib.process import client as processes

        return processes.call_process(
            self, process_id, processo, payload, insert_options, kind=REPAIR
        )

    def get_process(
        self, process_id: str, events: int = 20, tasks: int = 20
    ) -> dict[str, Any] | None:
        """The process ``process_id``, or None when unknown: ``state`` (a dict), ``status``,
        ``detail``, ``corrupted`` and ``corrupted_by``, ``remove_at``, ``timers`` (its
        pending timer), its last ``events`` events and last ``tasks`` tasks (oldest first;
        each with its ``kind`` and ``response``)."""
        from nsj_queue_lib.process import client as processes

        return processes.get_process(self, process_id, events, tasks)

    def call_response(self, task_id: int) -> Any:
        """What the handler of a process's task returned (the response of a call, as JSON
        gives it back), once the task succeeded; None before, or when it returned None.
        ``NotFoundError`` when the task is no process's."""
        from nsj_queue_lib.process import client as processes

        return processes.call_response(self, _task_id(task_id))

    def _workflow(self) -> WorkflowStore:
        if self._workflow_store is None:
            self._workflow_store = WorkflowStore.for_store(self._store, self.queue_table)
        return self._workflow_store

    def _cancel_children(self, attempt_id: int) -> None:
        """The children waiting for a task just cancelled: none where the queue has no
        dependency tables (SingleStore, whose client shares MySQL's driver)."""
        try:
            wstore = self._workflow()
            parents_failed(wstore, self._conn, [attempt_id])
        except WorkflowUnsupported:
            return

    @_atomic
    def retry_task(self, task_id: int) -> int:
        """A new 'pendente' attempt, due now, for a task that ran out of attempts (or a dead
        letter that did); returns its id. In the caller's transaction.

        ``NotFoundError`` for an unknown id; ``ValueError`` when the task's latest
        attempt is not an exhausted failure (nothing is written).
        """
        task_id = _task_id(task_id)
        latest = self._store.task_view(self._conn, task_id, lock=True)
        if latest is None:
            raise NotFoundError(f"task {task_id} not found in {self.queue_table}")
        new_id = client_inspection_store(self._conn, self.queue_table).retry_task(
            self._conn, task_id
        )
        if new_id is None:
            raise ValueError(
                f"task {latest['id_inicial']} is {latest['status']} (attempt {latest['id']}): "
                "only a task that ran out of attempts can be retried"
            )
        return new_id

    # -- fleet control (docs/fleet-control.md) --

    @_atomic
    def pause(self, processo: str | None = None, until: datetime.datetime | None = None) -> None:
        """Pause the whole queue, or one ``processo``, across every worker: from the
        commit of the caller's transaction on, no task it holds is claimed (running tasks
        finish). ``until`` (a timezone-aware datetime) ends the pause by itself; pausing
        again replaces it. Not on SingleStore (``NotImplementedError``)."""
        PauseStore(self._conn, self.queue_table).pause(
            self._conn, processo, until, by=f"client pid {os.getpid()}"
        )

    @_atomic
    def resume(self, processo: str | None = None) -> bool:
        """End the pause of the whole queue (or of ``processo``) at the commit of the
        caller's transaction, waking the workers; whether there was one."""
        return PauseStore(self._conn, self.queue_table).resume(self._conn, processo)

    @_atomic
    def reset_breaker(self, processo: str) -> bool:
        """Close ``processo``'s circuit breaker at the commit of the caller's transaction
        (its failures and any trial forgotten), waking the workers; whether it had
        failures or was open. The operator's way out of a breaker they know is wrong."""
        return BreakerStore(self._conn, self.queue_table).reset(self._conn, processo)

    @_atomic
    def reset_subscriber_breaker(self, subscriber_id: str) -> bool:
        """Close the webhook subscriber's circuit breaker at the commit of the caller's
        transaction (its failures and any trial forgotten; the deliveries it held due
        now); whether it had failures or was open. The subscriber table is the client's,
        else ``<queue table>_subscriber``. Not on SingleStore (``NotImplementedError``)."""
        from nsj_queue_lib.db.subscriber_breaker_store import SubscriberBreakerStore
        from nsj_queue_lib.fleet.subscriber_breakers import HELD_PREFIX

        table = self.queue_subscriber_table or f"{self.queue_table}_subscriber"
        store = SubscriberBreakerStore(self._conn, self.queue_table, table)
        return store.reset(self._conn, subscriber_id, HELD_PREFIX)

    def paused(self) -> list[dict[str, Any]]:
        """The pauses in force: ``{"processo": None | str, "until": None | ISO 8601}``,
        the whole queue's (``processo`` None) first."""
        return [p.as_dict() for p in PauseStore(self._conn, self.queue_table).paused(self._conn)]


CANCEL_ATTEMPTS = 5
CANCELLED_MESSAGE = model.CANCELLED_BEFORE_IT_RAN


def _task_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"task_id must be an int, got {type(value).__name__}")
    return value


def _no_trace_context() -> None:
    return None
