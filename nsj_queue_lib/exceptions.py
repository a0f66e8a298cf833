"""Error types raised by the library.

Driver errors never escape raw from the database layer: they are wrapped in
``DatabaseError`` with the original kept as ``__cause__``.
"""


class QueueLibError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(QueueLibError, ValueError):
    """The settings are missing or malformed.

    ``problems`` maps each bad variable to what is wrong with it, so that one
    start-up reports every mistake at once.
    """

    def __init__(self, problems: dict[str, str]):
        self.problems = dict(problems)
        lines = [f"{name}: {why}" for name, why in self.problems.items()]
        super().__init__("invalid configuration: " + "; ".join(lines))


class InvalidIdentifierError(QueueLibError, ValueError):
    """A table, schema or queue name that is not a plain SQL identifier."""


class DatabaseError(QueueLibError):
    """A database operation failed; the driver's error is ``__cause__``."""


class AttemptFenced(DatabaseError):
    """An attempt's success was refused because the attempt no longer owns its task's row
    (another worker rescued it and runs it again): its transaction, the handler's writes
    with it, was rolled back. Its liveness lock was released."""


class NotFoundError(QueueLibError, LookupError):
    """A row the caller asked for does not exist."""


class QueueTableMissingError(DatabaseError):
    """The configured queue table does not exist: a configuration error, not an outage."""


class ClaimRoutineError(QueueLibError):
    """The queue's claim function (procedure on MySQL) is missing or from another version.

    A schema to upgrade, not an outage: the worker stops at start and says so.
    """


class HandlerTransactionError(QueueLibError):
    """A handler ended the task's transaction (committed or rolled back ``bd_conn``)."""


class DatabaseAccessError(DatabaseError):
    """The database refused the worker's user or password, or does not know its database:
    configuration, not an outage. The worker stops at start instead of retrying."""


class PermanentError(QueueLibError):
    """Raised by a handler: this task can never succeed, so it is not retried.

    The attempt becomes 'falha' with ``estouro_tentativas`` set and its
    dead-letter task (handled by ``execute_dead``) follows at once, whatever
    attempts remain. A dead-letter task that raises it ends there.
    """


class TaskHeld(QueueLibError):
    """Raised by the library's own handlers when an attempt must not run yet (a webhook
    subscriber's open circuit breaker: fleet/subscriber_breakers.py): the attempt ends
    'falha_processando' with this ``mensagem`` and its next attempt is due after
    ``delay_s`` seconds, with the same ``tentativa`` (a held attempt uses none of the
    task's ``max_retry``). Not counted as a failure."""

    def __init__(self, message: str, delay_s: float) -> None:
        super().__init__(message)
        self.delay_s = max(0.0, float(delay_s))


class TaskCancelled(QueueLibError):
    """Raised by ``current_task().check_cancelled()`` once the running task was asked to stop.

    A handler that lets it propagate ends its task 'cancelada' (its writes rolled back, no
    retry, no dead letter); when the stop came from the task's timeout, the attempt fails
    with a ``mensagem`` starting ``timeout`` and is retried instead.
    """


class NoCurrentTaskError(QueueLibError, LookupError):
    """``current_task()`` was called outside a handler run by a worker."""


class WorkflowUnsupported(DatabaseError):
    """The queue holds no dependencies between tasks: SingleStore, or a queue that
    ``db_gen --upgrade`` has not reached (nsj_queue_lib/workflow/)."""


class TaskSuspended(BaseException):
    """A durable wait (``current_task().sleep``, ``.wait_event``) ended the attempt without
    failing it: the task is 'pendente' again, committed, and resumes when the wait ends.
    Raised through the handler to the worker; a ``BaseException`` so that a handler's
    ``except Exception`` does not stop it (nsj_queue_lib/workflow/waits.py)."""

    def __init__(self, mensagem: str):
        super().__init__(mensagem)
        self.mensagem = mensagem


class ProcessExistsError(QueueLibError, ValueError):
    """``start_process`` was given the id of a process that exists (nsj_queue_lib/process/)."""


class ProcessCorruptedError(QueueLibError, ValueError):
    """A call to a corrupted process (its last task was dead-lettered): until a repair task
    succeeds, it accepts only repairs (``QueueClient.repair_process``)."""


class TaskRefused(TaskCancelled):
    """The worker refused to run a claimed task (its process is corrupted or gone): it ends
    'cancelada' with ``mensagem`` saying why, without running."""

    def __init__(self, mensagem: str):
        super().__init__(mensagem)
        self.mensagem = mensagem
