"""Django's ORM on the worker's connection, inside the task's transaction.

The worker runs each task in a transaction on its own connection and commits the
task's 'sucesso' in it. While a Django task function runs, Django's connection for the
alias (``connections[alias]``, one per thread: the executor thread's) is made to hold
that connection, as if an outer ``atomic()`` block were open: the ORM writes in the
task's transaction, a nested ``atomic()`` is a savepoint, and nothing the task does can
commit or roll back the worker's transaction (``commit()`` inside an atomic block is
refused by Django itself). Afterwards Django's connection is given back its own state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from django.db import connections
from django.db.transaction import TransactionManagementError

logger = logging.getLogger("nsj_queue_lib.contrib.django")

# What Django keeps of a connection's transaction (BaseDatabaseWrapper.__init__).
_STATE = (
    "connection",
    "autocommit",
    "in_atomic_block",
    "savepoint_state",
    "savepoint_ids",
    "atomic_blocks",
    "commit_on_exit",
    "needs_rollback",
    "rollback_exc",
    "closed_in_transaction",
    "run_on_commit",
    "health_check_done",
)
BROKEN_TRANSACTION = (
    "the task function went on after a database error inside its transaction (Django marked "
    "it for rollback): its writes roll back and the attempt fails"
)


class _WorkerTransaction:
    """Stands for the worker's transaction in ``atomic_blocks``: ``atomic(durable=True)``
    in a task then fails as it does inside any other atomic block."""

    _from_testcase = False
    durable = False


@contextmanager
def lent_connection(
    alias: str, conn: Any, shape: Callable[[Any], AbstractContextManager[Any]]
) -> Iterator[None]:
    """Django's connection ``alias`` on ``conn`` (``shape``: the driver's set-up of it)."""
    wrapper = connections[alias]
    saved = {name: getattr(wrapper, name) for name in _STATE}
    try:
        with shape(conn) as shaped:
            wrapper.connection = shaped
            wrapper.autocommit = False
            wrapper.in_atomic_block = True
            wrapper.savepoint_state = 0
            wrapper.savepoint_ids = []
            wrapper.atomic_blocks = [_WorkerTransaction()]
            wrapper.commit_on_exit = False
            wrapper.needs_rollback = False
            wrapper.rollback_exc = None
            wrapper.closed_in_transaction = False
            wrapper.run_on_commit = []
            wrapper.health_check_done = True
            yield
            if wrapper.needs_rollback:
                raise TransactionManagementError(BROKEN_TRANSACTION)
            if wrapper.run_on_commit:
                # The worker commits after the function returns, out of Django's sight.
                logger.warning(
                    "%d transaction.on_commit() callback(s) of a task are dropped: the task's "
                    "commit is the worker's (enqueue a task instead: it runs once this one "
                    "commits)",
                    len(wrapper.run_on_commit),
                )
    finally:
        for name, value in saved.items():
            setattr(wrapper, name, value)
