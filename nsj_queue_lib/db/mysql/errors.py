"""PyMySQL errors as the store sees them: wrapped, classified, retried.

A deadlock (1213) or lock wait timeout (1205) while claiming or completing
is retried inside the store, never surfaced as a task failure.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from nsj_queue_lib.db.mysql.procedure import StatementFailed
from nsj_queue_lib.exceptions import AttemptFenced, DatabaseError
from nsj_queue_lib.log import get_logger

logger = get_logger("mysql")

ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
RETRYABLE_ERRORS = (ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK)
ER_DUP_ENTRY = 1062
# SIGNAL SQLSTATE '45000' of the claim procedure's fence (claim_procedure.sql): the finished
# task is no longer 'processando'; its transaction was rolled back, its lock released.
ER_SIGNAL_EXCEPTION = 1644
FENCED_MESSAGE = "nsjq fenced"
RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY = 0.005  # seconds; doubled per attempt, with jitter

T = TypeVar("T")


def is_driver_error(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] == "pymysql"


def error_code(exc: BaseException | None) -> int | None:
    """The server error number of a PyMySQL error (None for anything else)."""
    if isinstance(exc, StatementFailed):
        exc = exc.error
    if exc is None or not is_driver_error(exc):
        return None
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_fenced(exc: BaseException | None) -> bool:
    """The claim procedure refused a success: the attempt no longer owns its row."""
    if isinstance(exc, StatementFailed):
        exc = exc.error
    return error_code(exc) == ER_SIGNAL_EXCEPTION and FENCED_MESSAGE in str(exc)


def is_retryable(exc: BaseException | None) -> bool:
    """A deadlock or lock wait timeout: the transaction may simply be tried again."""
    return error_code(exc) in RETRYABLE_ERRORS


@contextmanager
def wrap_driver_errors(what: str) -> Iterator[None]:
    try:
        yield
    except StatementFailed as failed:
        if is_driver_error(failed.error):
            raise _wrapped(what, failed.error) from failed.error
        raise failed.error from None
    except Exception as exc:
        if is_driver_error(exc):
            raise _wrapped(what, exc) from exc
        raise


def _wrapped(what: str, exc: BaseException) -> DatabaseError:
    if is_fenced(exc):
        return AttemptFenced(f"{what}: {exc}".strip())
    return DatabaseError(f"{what} failed: {exc}".strip())


def retry_on_lock_errors(
    what: str, attempt: Callable[[], T], undo: Callable[[], None], attempts: int = RETRY_ATTEMPTS
) -> T:
    """Run ``attempt``; on a deadlock or lock wait timeout run ``undo`` and try again.

    ``undo`` must leave the connection as it was before the attempt (rolled
    back, locks of the attempt released). After ``attempts`` failures the
    last error leaves as DatabaseError.
    """
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            with wrap_driver_errors(f"{what} (undoing a failed attempt)"):
                undo()
            if number == attempts:
                cause = exc.error if isinstance(exc, StatementFailed) else exc
                raise DatabaseError(f"{what} failed {attempts} times: {cause}") from cause
            logger.debug("%s: %s, trying again (attempt %d of %d)", what, exc, number + 1, attempts)
            time.sleep(RETRY_BASE_DELAY * (2 ** (number - 1)) * (0.5 + random.random()))
    raise AssertionError("unreachable")  # pragma: no cover


def is_duplicate_key(exc: BaseException | None) -> bool:
    """A unique index refused the statement's row."""
    return error_code(exc) == ER_DUP_ENTRY
