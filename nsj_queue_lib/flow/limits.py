"""Per-processo limits: max_concurrent, max_concurrent_per_key, rate_limit, interval_s,
time_windows.

Declared with ``@Task`` (task.py), held cluster-wide in the queue's
``<queue>_limits`` table: one row per limited processo with its declaration
and the shared state the claims read and update (the next start an
``interval_s`` allows, the rate limiter's theoretical arrival time). Tasks of
a processo with a row are never taken by the ordinary claims (``limits_free`` in
db/conditions.py); a worker claims them one at a time with the limited claim routine
(``claim_limited_<queue>_v<N>``, db/<dialect>/limited_claim.sql, called by
db/limits_store.py), which locks the processo's limits row, so that counting
its running tasks and moving its state on cannot race another claim.

The rate limiter spreads starts evenly (one every period/N) and lets a late
claim catch up by at most ``RATE_CATCH_UP`` of the period, so that no window
of the period's length sees more than N plus that share (docs/flow-control.md).
Time windows are the worker's to judge (zoneinfo): it tells the routine which
are open.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import re
from collections.abc import Sequence
from typing import Any

from nsj_queue_lib.db.dialect import limits_table_name
from nsj_queue_lib.flow.windows import (
    MAX_WINDOW_TEXT,
    TimeWindow,
    is_open,
    parse_windows,
    seconds_until_open,
)

PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"^\s*(\d{1,9})\s*/\s*([smh])\s*$")
RATE_CATCH_UP = 0.08
MAX_RATE_TEXT = 30
MAX_INTERVAL_S = 86400.0 * 7
MAX_CONCURRENT = 1_000_000
# The stored time_windows text (one line per window).
WINDOWS_COLUMN_LIMIT = 4000


def parse_rate(text: Any) -> tuple[int, float]:
    """``"N/s"``, ``"N/m"``, ``"N/h"`` -> (N, period in seconds); ``ValueError`` otherwise."""
    if not isinstance(text, str) or len(text) > MAX_RATE_TEXT:
        raise ValueError(f'must be a string like "50/s", "10/m" or "100/h", got {text!r}')
    match = _RATE.match(text)
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f'must be "N/s", "N/m" or "N/h" with N >= 1, got {text!r}')
    return int(match.group(1)), PERIODS[match.group(2)]


def parse_interval(value: Any) -> tuple[float, float]:
    """``(min, max)`` seconds, 0 <= min <= max; ``ValueError`` otherwise."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"must be a (min, max) pair of seconds, got {value!r}")
    low, high = value
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound != bound:
            raise ValueError(f"must be a (min, max) pair of seconds, got {value!r}")
    if low < 0:
        raise ValueError(f"min must be >= 0, got {low!r}")
    if low > high:
        raise ValueError(f"min must be <= max, got ({low!r}, {high!r})")
    if high > MAX_INTERVAL_S:
        raise ValueError(f"max must be at most {MAX_INTERVAL_S:g} s, got {high!r}")
    return float(low), float(high)


def windows_text(value: str | Sequence[str]) -> str:
    """The stored form of ``time_windows``: one window per line (checked by the caller)."""
    return "\n".join([value] if isinstance(value, str) else list(value))


@dataclasses.dataclass(frozen=True)
class ProcessoLimits:
    """A processo's declared limits, as stored in the limits table."""

    processo: str
    max_concurrent: int | None = None
    rate_count: int | None = None
    rate_period_s: float | None = None
    interval_min_s: float | None = None
    interval_max_s: float | None = None
    time_windows: str | None = None
    # At most this many running tasks per fair_key (fleet/fair.py); unkeyed tasks are not
    # counted. Last: the positional order above predates it.
    max_concurrent_per_key: int | None = None

    @classmethod
    def declared(
        cls,
        processo: str,
        max_concurrent: int | None,
        rate_limit: str | None,
        interval_s: Sequence[float] | None,
        time_windows: str | Sequence[str] | None,
        max_concurrent_per_key: int | None = None,
    ) -> ProcessoLimits | None:
        """From ``@Task``'s options (already checked); None when none is set."""
        if (
            max_concurrent is None
            and max_concurrent_per_key is None
            and rate_limit is None
            and interval_s is None
            and not time_windows
        ):
            return None
        rate = parse_rate(rate_limit) if rate_limit is not None else (None, None)
        interval = parse_interval(interval_s) if interval_s is not None else (None, None)
        windows = windows_text(time_windows) if time_windows else None
        return cls(
            processo,
            max_concurrent,
            rate[0],
            rate[1],
            interval[0],
            interval[1],
            windows,
            max_concurrent_per_key,
        )

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ProcessoLimits:
        def number(name: str) -> float | None:
            value = row.get(name)
            return None if value is None else float(value)

        cap = row.get("max_concurrent")
        per_key = row.get("max_concurrent_per_key")
        count = row.get("rate_count")
        return cls(
            row["processo"],
            None if cap is None else int(cap),
            None if count is None else int(count),
            number("rate_period_s"),
            number("interval_min_s"),
            number("interval_max_s"),
            row.get("time_windows") or None,
            None if per_key is None else int(per_key),
        )

    def as_params(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        parts = []
        if self.max_concurrent is not None:
            parts.append(f"max_concurrent={self.max_concurrent}")
        if self.max_concurrent_per_key is not None:
            parts.append(f"max_concurrent_per_key={self.max_concurrent_per_key}")
        if self.rate_count is not None and self.rate_period_s is not None:
            unit = {1.0: "s", 60.0: "m", 3600.0: "h"}.get(self.rate_period_s, "?")
            parts.append(f"rate_limit={self.rate_count}/{unit}")
        if self.interval_min_s is not None:
            parts.append(f"interval_s=({self.interval_min_s:g}, {self.interval_max_s:g})")
        if self.time_windows:
            parts.append(f"time_windows={self.time_windows.splitlines()!r}")
        return ", ".join(parts) or "no limits"


def check_declaration(
    processo: str,
    max_concurrent: Any,
    rate_limit: Any,
    interval_s: Any,
    time_windows: Any,
    max_concurrent_per_key: Any = None,
) -> tuple[str, str] | None:
    """The first bad limit option and what is wrong with it, or None."""
    for option, cap in (
        ("max_concurrent", max_concurrent),
        ("max_concurrent_per_key", max_concurrent_per_key),
    ):
        if cap is not None and (
            isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_CONCURRENT
        ):
            return option, f"must be an integer in 1..{MAX_CONCURRENT}, got {cap!r}"
    checks = (
        ("rate_limit", rate_limit, parse_rate),
        ("interval_s", interval_s, parse_interval),
        ("time_windows", time_windows, _check_windows),
    )
    for option, value, check in checks:
        if value is None:
            continue
        try:
            check(value)
        except ValueError as exc:
            return option, str(exc)
    return None


def _check_windows(value: Any) -> None:
    if not isinstance(value, (str, list, tuple)):
        raise ValueError(f"must be a string or a list of strings, got {value!r}")
    parse_windows(value)
    if len(windows_text(value)) > WINDOWS_COLUMN_LIMIT:
        raise ValueError(f"must be at most {WINDOWS_COLUMN_LIMIT} characters in all")


# -- what the limited claim routine decides (db/<dialect>/limited_claim.sql) --

# How far ahead of a start's due moment a worker calls the limited claim: the
# routine then waits, holding the processo's limits row, until that moment
# (in the database, by the database's clock), so that the start lands on it
# rather than a wake-up and a round trip after it. 50 ms: on a loaded machine a
# worker's thread may wait that long for a CPU (bench_limits at load 25 was up to
# 30 ms late with 15 ms); the cost is an executor and a connection parked for
# as long, and the processo's row held (its other claims queue behind it).
EARLY_SECONDS = 0.05
# A processo held back only by max_concurrent is looked at again after this
# long (a slot freed in another worker sends no notification).
CAP_RECHECK_SECONDS = 1.0


def window_hash(processo: str, windows: str) -> str:
    """How the limited claim routine names a processo's time windows (both dialects'
    ``md5(processo || chr(10) || time_windows)``): the worker tells it which are open."""
    return hashlib.md5(f"{processo}\n{windows}".encode(), usedforsecurity=False).hexdigest()


def window_states(
    declared: Sequence[ProcessoLimits], now: datetime.datetime
) -> tuple[list[str], list[str], float | None]:
    """(window_hash of the open windows, of all known windows, seconds until the first
    closed one opens) of the processos in ``declared`` with time windows."""
    open_hashes, known, opens_in = [], [], []
    for limits in declared:
        if not limits.time_windows:
            continue
        digest = window_hash(limits.processo, limits.time_windows)
        known.append(digest)
        windows = _windows(limits.time_windows)
        if is_open(windows, now):
            open_hashes.append(digest)
        else:
            opens_in.append(seconds_until_open(windows, now))
    return open_hashes, known, min(opens_in) if opens_in else None


_window_cache: dict[str, tuple[TimeWindow, ...]] = {}


def _windows(text: str) -> tuple[TimeWindow, ...]:
    found = _window_cache.get(text)
    if found is None:
        found = parse_windows(text.splitlines())
        if len(_window_cache) < 1000:
            _window_cache[text] = found
    return found


# Disagreements between the declarations of workers of one queue.


def disagreements(
    declared: dict[str, ProcessoLimits], stored: dict[str, ProcessoLimits], handled: set[str]
) -> list[str]:
    """What differs between this worker's declarations and the table's, as log lines.

    ``handled``: the processos this worker routes with ``@Task`` (a row for one of
    them that this worker does not declare is a disagreement too).
    """
    lines = []
    for processo in sorted(set(declared) | (set(stored) & handled)):
        mine, theirs = declared.get(processo), stored.get(processo)
        if theirs is not None and mine != theirs:
            lines.append(
                f"processo {processo!r}: this worker declares "
                f"{mine.describe() if mine else 'no limits'}, another worker declared "
                f"{theirs.describe()}"
            )
    return lines


__all__ = [
    "MAX_WINDOW_TEXT",
    "ProcessoLimits",
    "check_declaration",
    "disagreements",
    "limits_table_name",
    "parse_interval",
    "parse_rate",
    "window_hash",
    "window_states",
]
