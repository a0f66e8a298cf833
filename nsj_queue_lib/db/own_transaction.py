"""One transaction for a client call that writes with more than one statement.

The client writes in its caller's transaction. On a connection in autocommit mode each
statement is a transaction of its own, so a call of several statements would be seen half
done: a process's task before the row that names it (the worker then refuses the task), a
child 'pendente' before it is set waiting (it runs before its parents), a workflow's tasks
before its edges. On such a connection, and only outside a transaction the caller opened
on it, those calls run in one transaction of their own, committed when the call returns
and rolled back when it raises. Elsewhere nothing changes.
"""

from __future__ import annotations

import contextlib
from typing import Any

from nsj_queue_lib.db.driver import connection_driver


def own_transaction(conn: Any) -> contextlib.AbstractContextManager[Any]:
    """A context manager for a client call's statements on ``conn`` (see the module)."""
    try:
        driver = connection_driver(conn)
    except TypeError:  # a connection of nsj_queue_lib.testing, or one no driver knows
        return contextlib.nullcontext()
    return driver.own_transaction(conn)
