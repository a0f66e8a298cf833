"""``insert_task`` on a psycopg 3 connection: the INSERT in the round trip that opens the
caller's transaction.

psycopg opens a transaction with a ``BEGIN`` of its own round trip before the first
statement, so one task enqueued in a transaction of its own took three (``BEGIN``, the
``INSERT``, the caller's ``COMMIT``). Here ``BEGIN`` and the prepared ``INSERT`` travel in
one pipeline (wire.py), and the transaction is left open as psycopg's own would be: the
caller commits or rolls it back as before. The statement is the store's own text with
``$n`` placeholders, prepared once per connection (one ``PreparedRoundTrip`` per text for
the whole process, so new clients on a pooled connection reuse it).

Only where the round trip opens the transaction: there a pooler in transaction mode that
gave it another server connection (the statement missing) is healed at once, the
transaction rolled back and run again with the unnamed statement (wire.py). Inside a
transaction the caller opened, or in autocommit, psycopg's own path runs: a missing
statement there would fail the caller's transaction, and no round trip is saved.
"""

from __future__ import annotations

import datetime
import re
import threading
from typing import Any

import psycopg
from psycopg import pq

from nsj_queue_lib.db.postgres.wire import PreparedRoundTrip, RoundTripError

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
# Statement texts seen (one per queue table and statement); past this many the oldest is
# dropped: a connection that used it prepares it again under a new name.
_MOST_STATEMENTS = 64
_round_trips: dict[str, tuple[PreparedRoundTrip, tuple[str, ...]]] = {}
_round_trips_lock = threading.Lock()
_IDLE = pq.TransactionStatus.IDLE


def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with ``%(name)s`` placeholders as ``$n`` (a name used twice keeps its
    number), and the names in their numbers' order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    converted = _PLACEHOLDER.sub(number, sql)
    if "%" in converted:  # an escaped %% or another style: not this module's to convert
        raise ValueError("statement has a % outside its placeholders")
    return converted, tuple(names)


def insert_returning_id(conn: Any, sql: str, row: dict[str, Any]) -> int | None:
    """Run the INSERT ``sql`` (one ``RETURNING id`` row) with ``row``'s values on ``conn``;
    its id, in a transaction this round trip opens. None (nothing sent) where ``conn`` is
    not an idle psycopg 3 connection out of autocommit and pipeline mode: psycopg's own
    path is for those. Raises the psycopg error of a failure, the transaction then failed
    as psycopg's would be.

    It holds the connection's lock, as psycopg's own operations do: a connection shared by
    threads sees this round trip whole."""
    if not isinstance(conn, psycopg.Connection):
        return None
    round_trip, names = _round_trip(sql)
    params = [_text(row.get(name)) for name in names]
    with conn.lock:
        if not _opens_a_transaction(conn):
            return None
        try:
            rows = round_trip.run(conn, params, None, begin=True)
        except RoundTripError as exc:
            raise exc.error from None
    return int(rows[0]["id"])


def _opens_a_transaction(conn: psycopg.Connection) -> bool:
    """Whether psycopg's next statement on ``conn`` would open a transaction with ``BEGIN``."""
    if conn.closed or conn.autocommit:
        return False
    pgconn = conn.pgconn
    return pgconn.pipeline_status == pq.PipelineStatus.OFF and pgconn.transaction_status == _IDLE


def _round_trip(sql: str) -> tuple[PreparedRoundTrip, tuple[str, ...]]:
    with _round_trips_lock:  # clients in several threads
        found = _round_trips.get(sql)
        if found is None:
            text, names = positional(sql)
            found = (PreparedRoundTrip(text, ("id",)), names)
            if len(_round_trips) >= _MOST_STATEMENTS:
                del _round_trips[next(iter(_round_trips))]
            _round_trips[sql] = found
        return found


def _text(value: Any) -> Any:
    """A parameter as wire.py sends it (text): timestamps in ISO 8601 (the statement casts
    them), bytes in bytea's hex form, the rest as they are (int, str, bool, None)."""
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return value
