"""Periodic tasks: ``@Task("processo", cron="*/5 * * * *")`` or ``every_s=``.

A schedule is a sequence of *slots*, instants in UTC. The worker fleet
enqueues one task per slot (``runtime/periodic_service.py``); this module is
the pure part: checking the options and the slot arithmetic.

- ``cron``: five fields (minute resolution), read in ``cron_tz`` (an IANA
  time zone, default UTC), so that ``0 3 * * *`` with ``America/Sao_Paulo``
  follows that zone's offset changes. Parsed by ``cronsim``.
- ``every_s``: every that many whole seconds, aligned on the Unix epoch
  (``every_s=300`` gives the same slots as ``*/5 * * * *`` in UTC). It needs
  no parser and allows slots shorter than a minute.

The payload of a slot's task is a JSON object: ``{"slot": "<ISO 8601, UTC>"}``
plus the keys of ``cron_payload``, a fixed JSON object the user may give
(``slot`` is reserved).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

UTC = datetime.timezone.utc
SLOT_KEY = "slot"
# Longest every_s: a year of seconds. A longer period is a cron expression's job.
EVERY_S_MAX = 366 * 24 * 3600
_MINUTE = datetime.timedelta(minutes=1)
# Longer than any offset change (at most two hours, historically): a forward walk started
# this long before a slot starts outside the repeated hour it may fall in.
_DST_MARGIN = datetime.timedelta(hours=3)
# Slots a forward walk may step over: three hours of a minutely schedule, and more.
_FORWARD_STEPS = 1000
CRONSIM_HINT = "cron= needs the cronsim package (pip install 'cronsim>=2.8,<3')"


def _cronsim() -> Any:
    """The ``cronsim`` module, imported when a cron schedule is first used (so that importing
    the library never fails for it)."""
    try:
        import cronsim
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ImportError(CRONSIM_HINT) from exc
    return cronsim


def _zone(name: str) -> datetime.tzinfo:
    if name.upper() == "UTC":
        return UTC
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


def schedule_problem(
    cron: Any, cron_tz: Any, every_s: Any, cron_payload: Any
) -> tuple[str, str] | None:
    """The first bad periodic option and what is wrong with it, or None."""
    if cron is not None and every_s is not None:
        return "every_s", "cannot be given with cron (choose one)"
    if cron is None and every_s is None:
        for option, value in (("cron_tz", cron_tz), ("cron_payload", cron_payload)):
            if value is not None:
                return option, "needs cron or every_s"
        return None
    if cron is not None:
        problem = _cron_problem(cron, cron_tz)
    elif cron_tz is not None:
        problem = "cron_tz", "applies to cron only (every_s counts from the Unix epoch)"
    else:
        problem = _every_problem(every_s)
    return problem or _payload_problem(cron_payload)


def _cron_problem(cron: Any, cron_tz: Any) -> tuple[str, str] | None:
    if not isinstance(cron, str) or not cron.strip():
        return "cron", f"must be a cron expression (five fields), got {cron!r}"
    if cron_tz is not None and not isinstance(cron_tz, str):
        return "cron_tz", f"must be a time zone name such as 'UTC', got {cron_tz!r}"
    try:
        zone = _zone(cron_tz or "UTC")
    except ValueError as exc:
        return "cron_tz", str(exc)
    cronsim = _cronsim()
    try:
        next(cronsim.CronSim(cron, datetime.datetime.now(zone)))
    except (cronsim.CronSimError, StopIteration) as exc:
        return "cron", f"is not a valid cron expression ({cron!r}: {exc or 'never due'})"
    return None


def _every_problem(every_s: Any) -> tuple[str, str] | None:
    if isinstance(every_s, bool) or not isinstance(every_s, int):
        return "every_s", f"must be a whole number of seconds, got {every_s!r}"
    if not 1 <= every_s <= EVERY_S_MAX:
        return "every_s", f"must be between 1 and {EVERY_S_MAX}, got {every_s}"
    return None


def _payload_problem(cron_payload: Any) -> tuple[str, str] | None:
    if cron_payload is None:
        return None
    if not isinstance(cron_payload, Mapping):
        return "cron_payload", f"must be a dict (a JSON object), got {type(cron_payload).__name__}"
    if SLOT_KEY in cron_payload:
        return "cron_payload", f"cannot hold the key {SLOT_KEY!r} (the slot's own)"
    try:
        json.dumps(dict(cron_payload), allow_nan=False)
    except (TypeError, ValueError) as exc:
        return "cron_payload", f"cannot be stored as JSON: {exc}"
    return None


@dataclasses.dataclass(frozen=True)
class PeriodicSchedule:
    """One processo's schedule; build it with ``from_options`` (options checked)."""

    processo: str
    cron: str | None = None
    cron_tz: str | None = None
    every_s: int | None = None
    payload: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        problem = schedule_problem(self.cron, self.cron_tz, self.every_s, self.payload)
        if problem is None and self.cron is None and self.every_s is None:
            problem = ("cron", "or every_s is required")
        if problem is not None:
            option, why = problem
            raise ValueError(f"@Task({self.processo!r}): {option} {why}")

    @property
    def zone(self) -> datetime.tzinfo:
        return _zone(self.cron_tz or "UTC")

    def latest_due(self, now: datetime.datetime) -> datetime.datetime:
        """The latest slot at or before ``now`` (aware), in UTC."""
        if self.every_s is not None:
            epoch = int(now.timestamp()) // self.every_s * self.every_s
            return datetime.datetime.fromtimestamp(epoch, UTC)
        # Slots fall on whole minutes: the latest one before the next minute starts. The
        # minute is counted in UTC: wall-clock arithmetic in the zone loses the fold of a
        # repeated hour (the night clocks go back), which put this an hour off.
        edge = now.astimezone(UTC).replace(second=0, microsecond=0) + _MINUTE
        candidate = next(_cronsim().CronSim(self.cron, edge.astimezone(self.zone), reverse=True))
        # cronsim's reverse walk may still misread a repeated hour: settle it forward from a
        # point before any offset change around it, as the schedule runs.
        latest = None
        for slot in self._forward(candidate.astimezone(UTC) - _DST_MARGIN):
            if slot > now:
                break
            latest = slot
        return candidate.astimezone(UTC) if latest is None else latest

    def next_after(self, now: datetime.datetime) -> datetime.datetime:
        """The first slot strictly after ``now`` (aware), in UTC."""
        if self.every_s is not None:
            epoch = (int(now.timestamp()) // self.every_s + 1) * self.every_s
            return datetime.datetime.fromtimestamp(epoch, UTC)
        # Inside a repeated hour cronsim starts from the hour's first pass, an hour early:
        # skip what it gives up to ``now`` (never a slot in the past, hence no busy loop).
        for slot in self._forward(now):
            if slot > now:
                return slot
        raise ValueError(f"{self.describe()}: no slot after {now.isoformat()}")

    def _forward(self, start: datetime.datetime) -> Iterator[datetime.datetime]:
        """The cron slots from ``start`` on, in UTC (a bounded walk)."""
        slots = _cronsim().CronSim(self.cron, start.astimezone(self.zone))
        for slot in itertools.islice(slots, _FORWARD_STEPS):
            yield slot.astimezone(UTC)

    def task_payload(self, slot: datetime.datetime) -> dict[str, Any]:
        return {**(self.payload or {}), SLOT_KEY: slot.astimezone(UTC).isoformat()}

    def describe(self) -> str:
        if self.every_s is not None:
            return f"every {self.every_s} s"
        return f"cron {self.cron!r} ({self.cron_tz or 'UTC'})"


def slot_key(slot: datetime.datetime) -> int:
    """A slot as stored in the periodic table: whole seconds since the Unix epoch."""
    return int(slot.timestamp())
