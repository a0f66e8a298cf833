"""An async handler's ``bd_conn`` on PostgreSQL: a psycopg ``AsyncConnection`` over the
executor's own libpq session.

The task was claimed on that session, its liveness lock (an advisory lock)
is held there and its transaction is open there: the handler's writes and
the 'sucesso' row must commit together on it. psycopg builds connections
of both kinds over one ``PGconn`` (always non-blocking), so the async
object shares the session of the pooled sync connection rather than
opening a second one. Only one of the two is used at a time: the executor
hands the session to the handler and takes it back when the handler ends.
"""

from __future__ import annotations

import psycopg


async def handler_connection(conn: psycopg.Connection) -> psycopg.AsyncConnection:
    """The async twin of ``conn``, made while ``conn`` is idle (autocommit, as ``conn``)."""
    twin = psycopg.AsyncConnection(conn.pgconn)
    # Like the executor's connection: statements run in the transaction the
    # executor opened; one that commits leaves the session idle, which the
    # executor reports (HandlerTransactionError) instead of opening another.
    await twin.set_autocommit(True)
    # Server-side prepared statement names are per connection object: the two
    # objects would both call theirs _pg3_0, ... on the one session.
    twin.prepare_threshold = None
    return twin
