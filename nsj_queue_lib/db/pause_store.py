"""The pause statements (``db/<dialect>/pause.sql``) on a caller's connection: what
``QueueClient.pause``, ``resume`` and ``paused`` run (nsj_queue_lib/fleet/pause.py says
what a pause means, db/pause_conditions.py how the claims read it)."""

from __future__ import annotations

import datetime
from typing import Any

from nsj_queue_lib.db.dialect import limits_table_name, notify_channel
from nsj_queue_lib.db.driver import client_store, connection_driver, dialect_errors
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.fleet.breakers import BreakerState
from nsj_queue_lib.fleet.pause import EPOCH, QUEUE_ROW, Pause, checked_processo, checked_until
from nsj_queue_lib.identifiers import split_table_name


class PauseStore:
    """The pause statements of one queue on a caller's connection (its transaction)."""

    def __init__(self, conn: Any, queue_table: str):
        dialect = limits_dialect_of(conn)
        if dialect is None:
            raise NotImplementedError(
                "pause and resume are not available on SingleStore (no limits table; "
                "docs/fleet-control.md)"
            )
        self._errors = dialect_errors(dialect)
        self.sql = render_queries(
            dialect,
            {"limits_table": limits_table_name(queue_table), "table": queue_table},
            "pause.sql",
        )
        self.channel = notify_channel_of(queue_table)
        self._array = dialect == "postgres"  # a list of ids: an array (else a tuple: IN)

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
            # MySQL/MariaDB: the UTC DATETIME itself (db/mysql/pause.sql says why).
            "until_utc": None if micros is None else _utc_text(micros),
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
            processo, until_us, is_expired = row_values(row, "processo", "until_us", "expired")
            if is_expired and not expired:
                continue
            until = (
                None if until_us is None else EPOCH + datetime.timedelta(microseconds=int(until_us))
            )
            found.append(Pause(None if processo == QUEUE_ROW else processo, until))
        return found


def _utc_text(micros: int) -> str:
    """A DATETIME(6) literal's text, in UTC, of ``micros`` since 1970 (a parameter)."""
    moment = EPOCH + datetime.timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def limits_dialect_of(conn: Any) -> str | None:
    """The dialect (``Driver.name``) of ``conn``'s limits table, which holds the pauses and
    the breakers; None where the database has none (SingleStore). The dialect's LIMITS are
    not loaded: the pause and breaker statements do not need them."""
    driver = connection_driver(conn)
    if driver.limits_module is None or (driver.name == "mysql" and is_singlestore(conn)):
        return None
    return driver.name


def is_singlestore(conn: Any) -> bool:
    """A MySQL-family connection to SingleStore (its client store knows the server)."""
    server = getattr(client_store(conn, "nsjq_probe", None), "server", None)
    return server is not None and server(conn).flavour == "singlestore"


def notify_channel_of(queue_table: str) -> str:
    """The queue's wake-up channel on PostgreSQL (its insert trigger's)."""
    return notify_channel(split_table_name(queue_table)[1])


class BreakerStore(PauseStore):
    """The circuit breakers' statements (fleet/breakers.py), in the caller's transaction."""

    def fail(self, conn: Any, processo: str, by: str) -> BreakerState:
        """Count one more consecutive failure; the breaker after it, its row locked."""
        self._run(conn, "breaker_fail", {"processo": processo, "by": by[:200]})
        found = self.state(conn, processo)
        assert found is not None  # the upsert wrote it
        return found

    def state(self, conn: Any, processo: str) -> BreakerState | None:
        """The processo's breaker, its row locked until the transaction ends."""
        for row in self._run(conn, "breaker_state", {"processo": processo}):
            failures, is_open, trial, task = row_values(
                row, "breaker_failures", "breaker_open", "breaker_trial", "breaker_trial_task"
            )
            return BreakerState(
                processo, int(failures), bool(is_open), bool(trial), trial_task=int_or_none(task)
            )
        return None

    def open(self, conn: Any, processo: str, cool_down_s: float) -> None:
        self._run(conn, "breaker_open", {"processo": processo, "cool_down_s": cool_down_s})

    def undecided(self, conn: Any, processo: str, task_id: int) -> bool:
        """The trial ``task_id`` ended without an outcome: another may start (the breaker
        stays open); whether it was the trial."""
        with self._errors.wrap_driver_errors("pause: breaker_undecided"), conn.cursor() as cur:
            cur.execute(self.sql["breaker_undecided"], {"processo": processo, "task": task_id})
            return bool(cur.rowcount)

    def close(self, conn: Any, processo: str) -> None:
        """Closed; the row gone when nothing else keeps it; the workers woken (PostgreSQL)."""
        self._run(conn, "breaker_reset", {"processo": processo})
        self._run(conn, "forget", {"processo": processo})
        self._run(conn, "wake", {"channel": self.channel})

    def reset(self, conn: Any, processo: str) -> bool:
        """The operator's reset: the breaker closed, its failures and trial forgotten, the
        workers woken; whether it had failures or was open."""
        if processo is None:  # breakers are per processo; the whole queue's row has none
            raise ValueError("processo must be a non-empty string")
        key = checked_processo(processo)
        state = self.state(conn, key)
        self.close(conn, key)
        return state is not None and (state.open or state.failures > 0)

    def breakers(self, conn: Any) -> list[BreakerState]:
        """The breakers with failures counted, or open."""
        found = []
        rows = [row_values(row, *_BREAKER_COLUMNS) for row in self._run(conn, "breakers")]
        trial_tasks = [int(task) for *_, task, _age in rows if task is not None]
        timeouts = self._trial_timeouts(conn, trial_tasks)
        for processo, failures, is_open, trial, until_us, task, age in rows:
            timeout = None if task is None else timeouts.get(int(task))
            until = (
                None if until_us is None else EPOCH + datetime.timedelta(microseconds=int(until_us))
            )
            found.append(
                BreakerState(
                    processo,
                    int(failures),
                    bool(is_open),
                    bool(trial),
                    until,
                    trial_task=int_or_none(task),
                    trial_age_s=None if age is None else float(age),
                    trial_timeout_s=None if timeout is None else float(timeout),
                )
            )
        return found

    def _trial_timeouts(self, conn: Any, tasks: list[int]) -> dict[int, Any]:
        """The trial tasks' own timeout_s (None: their processo's), by task id."""
        if not tasks:
            return {}
        rows = self._run(conn, "trial_timeouts", {"ids": tasks if self._array else tuple(tasks)})
        return {
            int(task): timeout for task, timeout in (row_values(r, "id", "timeout_s") for r in rows)
        }


# The columns of the breakers statement, in its order.
_BREAKER_COLUMNS = (
    "processo",
    "breaker_failures",
    "breaker_open",
    "breaker_trial",
    "until_us",
    "breaker_trial_task",
    "trial_age_s",
)


def int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def row_values(row: Any, *names: str) -> tuple[Any, ...]:
    """A row's values in ``names`` order, from a tuple or a DictCursor's dict."""
    if isinstance(row, dict):
        return tuple(row[n] for n in names)
    return tuple(row)
