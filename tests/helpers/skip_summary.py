"""The terminal summary's "skipped, by cause" section: how many tests did not run for want
of MariaDB, PgBouncer, a browser..., and what enables each.

Without database variables ``make test`` runs on an embedded PostgreSQL and skips what
needs more (docs/development/testing.md); pytest's own summary only gives the total. This
section groups the skips by the start of their reason (``CAUSES``, first match wins) and
names the variable or command that brings each group back. Reasons that match no cause
are listed as they are, most frequent first.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

PG_DSN_EXAMPLE = "TEST_PG_DSN='host=127.0.0.1 port=5432 user=postgres dbname=test'"
OTHER_REASONS_SHOWN = 8


@dataclasses.dataclass(frozen=True)
class Cause:
    """Skips whose reason contains any of ``markers`` (case-insensitive)."""

    want: str  # "for want of <want>"
    enable: str  # the variable or command that enables them
    markers: tuple[str, ...]

    def matches(self, reason: str) -> bool:
        text = reason.lower()
        return any(marker.lower() in text for marker in self.markers)


CAUSES = (
    Cause(
        "MariaDB/MySQL",
        "TEST_MYSQL_DSN='mysql://root:@127.0.0.1:3306/test' (a reachable MariaDB 10.6+/MySQL 8)",
        ("TEST_MYSQL_DSN",),
    ),
    Cause(
        "PostgreSQL (the embedded pgserver did not start)",
        f"{PG_DSN_EXAMPLE}, or see the reason: make test PYTEST_ARGS='-rs'",
        ("embedded PostgreSQL (pgserver) did not start", "pgserver is not installed"),
    ),
    Cause(
        "auto_explain (the embedded PostgreSQL has no contrib modules)",
        f"{PG_DSN_EXAMPLE} (a full PostgreSQL)",
        ("auto_explain is not available",),
    ),
    Cause("PgBouncer", "apt-get install pgbouncer", ("pgbouncer",)),
    Cause(
        "a browser (chromium)",
        "apt-get install chromium, or CHROMIUM=/path/to/chromium",
        ("chromium",),
    ),
    Cause(
        "a Galera cluster",
        "apt-get install galera-4 rsync mariadb-server",
        ("galera",),
    ),
    Cause(
        "private PostgreSQL/MariaDB servers (TLS, failover, restart tests)",
        "apt-get install postgresql mariadb-server openssl (.ci/run does)",
        ("cannot start a private",),
    ),
    Cause(
        "nsj-queue-lib 1.2.2 from PyPI (the upgrade and mixed-fleet tests)",
        "network access to PyPI (installed once into the temporary directory)",
        ("nsj-queue-lib==",),
    ),
    Cause(
        "a non-loopback IPv4 address",
        "a network interface with an IPv4 address",
        ("non-loopback IPv4",),
    ),
)


def skip_reason(report: Any) -> str:
    """The reason of a skipped test or collector report (``Skipped: `` removed)."""
    longrepr = report.longrepr
    if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr or "")
    return reason.removeprefix("Skipped: ").strip()


def cause_of(reason: str) -> Cause | None:
    return next((cause for cause in CAUSES if cause.matches(reason)), None)


def summary_lines(reasons: list[str]) -> list[str]:
    """The section's lines for the skip reasons of a run (empty: no skips)."""
    by_cause: Counter[Cause] = Counter()
    others: Counter[str] = Counter()
    for reason in reasons:
        cause = cause_of(reason)
        if cause is None:
            others[reason] += 1
        else:
            by_cause[cause] += 1
    rows = [
        (count, f"for want of {cause.want}: {cause.enable}")
        for cause, count in by_cause.most_common()
    ]
    shown = others.most_common(OTHER_REASONS_SHOWN)
    rows += [(count, f"because {reason}") for reason, count in shown]
    hidden = sum(others.values()) - sum(count for _, count in shown)
    if hidden:
        rows.append((hidden, "for other reasons (make test PYTEST_ARGS='-rs' lists them)"))
    width = len(str(max((count for count, _ in rows), default=0)))
    return [f"{count:>{width}} skipped {text}" for count, text in rows]


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any) -> None:
    reports = terminalreporter.stats.get("skipped", [])
    lines = summary_lines([skip_reason(report) for report in reports])
    if not lines:
        return
    terminalreporter.section("skipped, by cause (docs/development/testing.md)", sep="=")
    for line in lines:
        terminalreporter.write_line(line)
