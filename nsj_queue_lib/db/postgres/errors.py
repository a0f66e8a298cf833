"""PostgreSQL's errors as the library's: ``DatabaseError``, and ``AttemptFenced`` for the
fence of the claim and settle functions (the driver's error is the ``__cause__``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from nsj_queue_lib.exceptions import AttemptFenced, DatabaseError

# What the claim and settle functions raise when a task is no longer 'processando' as its
# success is written (claim_function.sql): the transaction is rolled back.
FENCED_SQLSTATE = "NQ001"
FENCED_MESSAGE = "nsjq fenced:"


def is_fenced(exc: BaseException) -> bool:
    """The fence's error, whether psycopg raised it (its SQLSTATE) or wire.py rebuilt it
    from a pipeline's result (by message: an unknown SQLSTATE has no class of its own)."""
    return getattr(exc, "sqlstate", None) == FENCED_SQLSTATE or FENCED_MESSAGE in str(exc)


def _is_driver_error(exc: BaseException) -> bool:
    root = type(exc).__module__.split(".")[0]
    return root in ("psycopg", "psycopg2", "psycopg_pool")


@contextmanager
def wrap_driver_errors(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if _is_driver_error(exc):
            if is_fenced(exc):
                raise AttemptFenced(f"{what}: {exc}".strip()) from exc
            raise DatabaseError(f"{what} failed: {exc}".strip()) from exc
        raise
