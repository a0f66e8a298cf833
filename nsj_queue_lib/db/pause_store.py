"""The pause statements (``db/<dialect>/pause.sql``) on a caller's connection: what
``QueueClient.pause``, ``resume`` and ``paused`` run (nsj_queue_lib/fleet/pause.py says
what a pause means, db/pause_conditions.py how the claims read it)."""

from __future__ import annotations

import datetime
import decimal
import importlib
from typing import Any

from nsj_queue_lib.db.dialect import notify_channel
from nsj_queue_lib.db.driver import _connection_driver
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.fleet.pause import _EPOCH, QUEUE_ROW, Pause, checked_processo, checked_until
from nsj_queue_lib.flow.limits import limits_table_name
from nsj_queue_lib.identifiers import split_table_name


class PauseStore:
    """The pause statements of one queue on a caller's connection (its transaction)."""

    def __init__(self, conn: Any, queue_table: str):
        driver = _connection_driver(conn)
        limits = driver.limits
        if limits is None or (limits.name == "mysql" and _is_singlestore(conn)):
            raise NotImplementedError(
                "pause and resume are not available on SingleStore (no limits table; "
                "docs/fleet-control.md)"
            )
        self._errors = importlib.import_module(f"nsj_queue_lib.db.{limits.name}.errors")
        self.sql = render_queries(
            limits.name, {"limits_table": limits_table_name(queue_table)}, "pause.sql"
        )
        self.channel = notify_channel_of(queue_table)

    def _run(self, conn: Any, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        with self._errors.wrap_driver_errors(f"pause: {name}"), conn.cursor() as cur:
            cur.execute(self.sql[name], params or {})
            return list(cur.fetchall()) if cur.description else []

    def pause(self, conn: Any, processo: str | None, until: datetime.datetime | None, by: str):
        key = checked_processo(processo)
        micros = checked_until(until)
        params = {
            "processo": key,
            "until_us": micros,
            "until_s": None if micros is None else decimal.Decimal(micros).scaleb(-6),
            "by": by[:200],
        }
        self._run(conn, "pause", params)

    def resume(self, conn: Any, processo: str | None) -> bool:
        """End the pause; whether there was one (expired or not)."""
        key = checked_processo(processo)
        was = any(p.processo == (processo or None) for p in self.paused(conn, expired=True))
        self._run(conn, "resume", {"processo": key})
        self._run(conn, "forget", {"processo": key})
        self._run(conn, "wake", {"channel": self.channel})
        return was

    def paused(self, conn: Any, expired: bool = False) -> list[Pause]:
        """The pauses in force (with ``expired``: and those whose ``until`` passed), the
        whole queue's first."""
        found = []
        for row in self._run(conn, "paused"):
            if isinstance(row, dict):  # a DictCursor connection
                row = (row["processo"], row["until_us"], row["expired"])
            processo, until_us, is_expired = row
            if is_expired and not expired:
                continue
            until = (
                None
                if until_us is None
                else _EPOCH + datetime.timedelta(microseconds=int(until_us))
            )
            found.append(Pause(None if processo == QUEUE_ROW else processo, until))
        return found


def _is_singlestore(conn: Any) -> bool:
    from nsj_queue_lib.db.mysql.names import SINGLESTORE, server_info

    return bool(server_info(conn).flavour == SINGLESTORE)


def notify_channel_of(queue_table: str) -> str:
    """The queue's wake-up channel on PostgreSQL (its insert trigger's)."""
    return notify_channel(split_table_name(queue_table)[1])
