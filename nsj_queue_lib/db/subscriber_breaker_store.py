"""The webhook subscribers' circuit-breaker statements (``db/<dialect>/subscriber_breakers.sql``)
on one connection, in its transaction (fleet/subscriber_breakers.py says what they do)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from nsj_queue_lib.db.driver import dialect_errors
from nsj_queue_lib.db.pause_store import (
    int_or_none,
    limits_dialect_of,
    notify_channel_of,
    row_values,
)
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.fleet.breakers import BreakerState
from nsj_queue_lib.fleet.pause import EPOCH
from nsj_queue_lib.notify import SCHEDULED_PAYLOAD

RELEASE_BATCH = 500  # held deliveries made due per statement when a breaker closes
_LISTED = (
    "id",
    "breaker_failures",
    "breaker_open",
    "breaker_trial",
    "until_us",
    "breaker_trial_task",
    "trial_age_s",
    "circuit_breaker_cool_down_s",
)
_FOUND = (
    "circuit_breaker_failures",
    "circuit_breaker_cool_down_s",
    "breaker_open",
    "breaker_trial",
    "breaker_trial_task",
    "until_s",
    "trial_age_s",
)


@dataclasses.dataclass(frozen=True)
class SubscriberBreaker:
    """A subscriber's breaker as a delivery finds it: its settings (None: no breaker) and
    state; ``until_s``: seconds until the cool-down ends (negative: ended)."""

    failures: int | None
    cool_down_s: float | None
    state: BreakerState
    until_s: float | None


class SubscriberBreakerStore:
    def __init__(self, conn: Any, queue_table: str, subscriber_table: str):
        dialect = limits_dialect_of(conn)
        if dialect is None:
            raise NotImplementedError(
                "webhook subscribers' circuit breakers are not available on SingleStore "
                "(docs/fleet-control.md)"
            )
        self._errors = dialect_errors(dialect)
        values = {"subscriber_table": subscriber_table, "queue_table": queue_table}
        self.channel = notify_channel_of(queue_table)
        self.queue_table = queue_table  # an identifier checked by the settings or db_gen
        # The queue table's clock (its data_hora): the dialect's.
        self._now = "clock_timestamp()" if dialect == "postgres" else "NOW(6)"
        self.sql = render_queries(dialect, values, "subscriber_breakers.sql")

    def _run(self, conn: Any, name: str, params: dict[str, Any]) -> tuple[list[Any], int]:
        """(the rows, the row count) of statement ``name``."""
        with self._errors.wrap_driver_errors(f"subscriber breaker: {name}"), conn.cursor() as cur:
            cur.execute(self.sql[name], params)
            rows = list(cur.fetchall()) if cur.description else []
            return rows, cur.rowcount

    def find(self, conn: Any, subscriber_id: str) -> SubscriberBreaker | None:
        """The subscriber's breaker (None: no such subscriber)."""
        for row in self._run(conn, "subscriber_breaker", {"id": subscriber_id})[0]:
            failures, cool_down, is_open, trial, task, until_s, age = row_values(row, *_FOUND)
            state = BreakerState(
                subscriber_id,
                0,
                bool(is_open),
                bool(trial),
                trial_task=int_or_none(task),
                trial_age_s=None if age is None else float(age),
            )
            return SubscriberBreaker(
                int_or_none(failures),
                None if cool_down is None else float(cool_down),
                state,
                None if until_s is None else float(until_s),
            )
        return None

    def take_trial(self, conn: Any, subscriber_id: str, task_id: int) -> bool:
        """Whether this delivery became the trial (the cool-down is over, no trial yet)."""
        params = {"id": subscriber_id, "task": task_id}
        return self._run(conn, "subscriber_breaker_trial", params)[1] == 1

    def fail(self, conn: Any, subscriber_id: str) -> BreakerState | None:
        """One more consecutive failure; the breaker after it, its row locked."""
        self._run(conn, "subscriber_breaker_fail", {"id": subscriber_id})
        return self.state(conn, subscriber_id)

    def state(self, conn: Any, subscriber_id: str) -> BreakerState | None:
        """The breaker, its row locked until the transaction ends."""
        for row in self._run(conn, "subscriber_breaker_state", {"id": subscriber_id})[0]:
            failures, is_open, trial, task = row_values(
                row, "breaker_failures", "breaker_open", "breaker_trial", "breaker_trial_task"
            )
            return BreakerState(
                subscriber_id,
                int(failures),
                bool(is_open),
                bool(trial),
                trial_task=int_or_none(task),
            )
        return None

    def open(self, conn: Any, subscriber_id: str, cool_down_s: float) -> None:
        params = {"id": subscriber_id, "cool_down_s": cool_down_s}
        self._run(conn, "subscriber_breaker_open", params)

    def close(self, conn: Any, subscriber_id: str, held_prefix: str) -> int:
        """Closed; the deliveries it held due now (how many)."""
        self._run(conn, "subscriber_breaker_reset", {"id": subscriber_id})
        return self.release(conn, subscriber_id, held_prefix)

    def release(self, conn: Any, subscriber_id: str, held_prefix: str) -> int:
        """The deliveries the subscriber's breaker held, due now (how many)."""
        params = {"id": subscriber_id, "held_prefix": held_prefix + "%"}
        held = [
            int(row_values(r, "id")[0])
            for r in self._run(conn, "subscriber_breaker_held", params)[0]
        ]
        released = 0
        for start in range(0, len(held), RELEASE_BATCH):
            ids = held[start : start + RELEASE_BATCH]
            marks = ", ".join(["%s"] * len(ids))
            # Still 'agendada': not promoted (and perhaps claimed) since the read.
            sql = (
                f"UPDATE {self.queue_table} SET data_hora = {self._now}"
                f" WHERE id IN ({marks}) AND status = 'agendada'"
            )
            with (
                self._errors.wrap_driver_errors("subscriber breaker: release"),
                conn.cursor() as cur,
            ):
                cur.execute(sql, ids)
                released += cur.rowcount
        if released:
            wake = {"channel": self.channel, "payload": SCHEDULED_PAYLOAD}
            self._run(conn, "subscriber_breaker_wake", wake)
        return released

    def reset(self, conn: Any, subscriber_id: str, held_prefix: str) -> bool:
        """The operator's reset: closed, its failures and trial forgotten, its held
        deliveries due now; whether it had failures or was open."""
        state = self.state(conn, subscriber_id)
        self.close(conn, subscriber_id, held_prefix)
        return state is not None and (state.open or state.failures > 0)

    def undecided(self, conn: Any, subscriber_id: str, task_id: int) -> bool:
        params = {"id": subscriber_id, "task": task_id}
        return self._run(conn, "subscriber_breaker_undecided", params)[1] == 1

    def breakers(self, conn: Any) -> list[tuple[BreakerState, float | None]]:
        """The breakers with failures counted, or open, each with its cool-down."""
        found = []
        for row in self._run(conn, "subscriber_breakers", {})[0]:
            key, failures, is_open, trial, until_us, task, age, cool_down = row_values(
                row, *_LISTED
            )
            until = (
                None if until_us is None else EPOCH + datetime.timedelta(microseconds=int(until_us))
            )
            state = BreakerState(
                str(key),
                int(failures),
                bool(is_open),
                bool(trial),
                until,
                trial_task=int_or_none(task),
                trial_age_s=None if age is None else float(age),
            )
            found.append((state, None if cool_down is None else float(cool_down)))
        return found


def subscriber_breakers(conn: Any, queue_table: str) -> list[dict[str, Any]]:
    """The breakers with failures counted, or open, of the queue's subscriber table as
    db_gen names it (``<queue table>_subscriber``), for nsjq status and the console: each
    ``{"subscriber", "failures", "state", "until"}``. [] where they cannot be read
    (SingleStore, no such table, a table db_gen --upgrade has not reached), the
    transaction rolled back."""
    try:
        store = SubscriberBreakerStore(conn, queue_table, f"{queue_table}_subscriber")
        found = store.breakers(conn)
    except (NotImplementedError, DatabaseError):
        rollback = getattr(conn, "rollback", None)
        if rollback is not None:
            rollback()
        return []
    shown = []
    for state, _ in found:
        view = state.as_dict()
        shown.append(dict(subscriber=view.pop("processo"), **view))
    return shown
