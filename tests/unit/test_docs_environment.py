"""docs/reference/environment.md lists every variable Settings.from_env reads, with its real default.

The web server's own settings (``WebSettings.from_env``, QUEUE_WEB_*) are held to the same rule.

The list of variables is not kept by hand: ``Settings.from_env`` runs on a
mapping that records every name it asks for (aliases included). So a variable
added to ``nsj_queue_lib/settings.py`` fails here until the reference page has
a row for it, and a row whose variable the settings no longer read fails too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.web.settings import WebSettings
from nsj_queue_lib.workers_json import RecordingEnviron

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference" / "environment.md"
# Rows after this heading are variables of other programs (demo, tests, benchmarks).
OTHER_PROGRAMS = "**Read by other commands**"


def reference_rows() -> tuple[dict[str, str], set[str]]:
    """({variable: its default cell} of the settings tables, {variables of other programs})."""
    text = REFERENCE.read_text(encoding="utf-8")
    settings_part, _, other_part = text.partition(OTHER_PROGRAMS)
    defaults: dict[str, str] = {}
    for line in settings_part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0]):
                defaults[name] = cells[1]
    others = {
        name
        for line in other_part.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", line.split("|")[1])
    }
    return defaults, others


def required_environment() -> dict[str, str]:
    """The variables the reference calls required (the first name of each row), each set."""
    text = REFERENCE.read_text(encoding="utf-8").partition(OTHER_PROGRAMS)[0]
    rows = re.findall(r"^\| `([A-Z][A-Z0-9_]*)`[^|]*\| required \|", text, flags=re.M)
    return {name: "x" for name in rows}


MINIMAL = required_environment()


def variables_read_by_settings() -> set[str]:
    """What from_env asks for, given everything and given nothing (aliases of required ones)."""
    asked: set[str] = set()
    for values in (MINIMAL, {}):
        for from_env in (Settings.from_env, WebSettings.from_env):
            environ = RecordingEnviron(values)
            try:
                from_env(environ)
            except ConfigError:
                pass  # the empty environment: every required variable (and alias) was asked for
            asked |= environ.asked
    return asked


def all_settings(environ: Mapping[str, str]) -> tuple[Settings, WebSettings]:
    return Settings.from_env(environ), WebSettings.from_env(environ)


def test_the_required_variables_of_the_reference_are_enough():
    assert sorted(MINIMAL) == ["DB_BASE", "DB_HOST", "DB_USER", "QUEUE_NAME", "QUEUE_TABLE"]
    Settings.from_env(MINIMAL)  # nothing else is required


def test_the_recorder_sees_what_settings_read():
    # Guards the guard: a recorder that saw nothing would make the next test pass vacuously.
    read = variables_read_by_settings()
    assert {
        "DB_HOST",
        "DATABASE_HOST",
        "QUEUE_CONCURRENCY",
        "QUEUE_SERVER_BIND",
        "QUEUE_WEB_PORT",
    } <= read


def test_every_variable_of_the_settings_is_in_the_reference():
    documented, _ = reference_rows()
    missing = sorted(variables_read_by_settings() - set(documented))
    assert not missing, f"add these to {REFERENCE.relative_to(ROOT)}: {missing}"


def test_every_variable_of_the_reference_is_read_by_the_settings():
    documented, others = reference_rows()
    stale = sorted(set(documented) - variables_read_by_settings())
    assert not stale, f"{REFERENCE.relative_to(ROOT)} documents variables nobody reads: {stale}"
    assert others, f"the {OTHER_PROGRAMS} table of {REFERENCE.name} was not found"


def _documented_default(cell: str) -> str | None:
    """The value to set for a default cell such as `100`, `0.5`, `text`, `true`; None for prose."""
    value = cell.strip("`")
    if re.fullmatch(r"[A-Za-z0-9_.]+", value) and value not in ("required", "unset", "empty"):
        return value
    return None


def _checked_defaults() -> list[tuple[str, str]]:
    documented, _ = reference_rows()
    pairs = [(name, _documented_default(cell)) for name, cell in documented.items()]
    return [(name, value) for name, value in pairs if value is not None]


def test_the_reference_gives_defaults_to_check():
    names = {name for name, _ in _checked_defaults()}
    assert {
        "QUEUE_MAX_RETRY",
        "QUEUE_POLL_INTERVAL",
        "LOG_FORMAT",
        "SERVER_HOST",
        "QUEUE_WEB_PORT",
    } <= names


@pytest.mark.parametrize(("variable", "value"), _checked_defaults())
def test_a_documented_default_is_the_real_default(variable, value):
    # Setting a variable to its documented default must change nothing.
    assert all_settings({**MINIMAL, variable: value}) == all_settings(MINIMAL), (
        f"{REFERENCE.name} says {variable} defaults to {value!r}"
    )
