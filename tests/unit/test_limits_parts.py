"""Per-processo limits, the pure parts: parsing, window arithmetic, the windows the claim
is told are open."""

from __future__ import annotations

import datetime
import hashlib

import pytest

from nsj_queue_lib import Task
from nsj_queue_lib.flow.limits import (
    ProcessoLimits,
    disagreements,
    parse_interval,
    parse_rate,
    window_hash,
    window_states,
)
from nsj_queue_lib.flow.windows import is_open, parse_window, parse_windows, seconds_until_open
from nsj_queue_lib.task import TaskRegistry, checked_limits

UTC = datetime.timezone.utc


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"), [("50/s", (50, 1.0)), ("10/m", (10, 60.0)), (" 3 / h ", (3, 3600.0))]
)
def test_rates(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text", ["50", "0/s", "5/d", "-1/s", "x/s", 5, None, "9" * 40 + "/s"])
def test_bad_rates(text):
    with pytest.raises(ValueError):
        parse_rate(text)


def test_intervals():
    assert parse_interval((0.2, 0.4)) == (0.2, 0.4)
    assert parse_interval([5, 5]) == (5.0, 5.0)
    for bad in [(0.4, 0.2), (-1, 2), (1,), "1-2", (True, 2), (1, float("nan")), (0, 10**9)]:
        with pytest.raises(ValueError):
            parse_interval(bad)


def test_business_hours_in_sao_paulo():
    windows = parse_windows("mon-fri 08:00-18:00 America/Sao_Paulo")
    # Tuesday 2026-11-24, 10:59 UTC = 07:59 in Sao Paulo (UTC-3).
    assert not is_open(windows, at("2026-11-24T10:59:00"))
    assert seconds_until_open(windows, at("2026-11-24T10:59:00")) == 60
    assert is_open(windows, at("2026-11-24T11:00:00"))
    assert not is_open(windows, at("2026-11-24T21:00:00"))  # 18:00 local: closed
    # Friday evening: opens Monday 08:00 local.
    assert seconds_until_open(windows, at("2026-11-27T21:00:00")) == (2 * 24 + 14) * 3600


def test_windows_crossing_midnight_and_ranges_across_the_week():
    night = parse_windows(["fri-mon 22:00-06:00", "wed 12:00:30-12:00:40 UTC"])
    assert is_open(night, at("2026-11-24T05:59:59"))  # Tuesday morning: Monday's window
    assert not is_open(night, at("2026-11-24T06:00:00"))
    assert not is_open(night, at("2026-11-24T22:00:00"))  # Tuesday evening: no window
    assert seconds_until_open(night, at("2026-11-25T12:00:00")) == 30
    assert parse_window("00:00-24:00").end is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "mon",
        "mon 8-9",
        "xyz 08:00-09:00",
        "mon 25:00-26:00",
        "mon 08:00-08:00",
        "mon 08:00-09:00 Mars/Base",
        "mon 08:00-09:00 UTC extra",
        "x" * 300,
    ],
)
def test_bad_windows(text):
    with pytest.raises(ValueError):
        parse_window(text)


NOW = at("2026-11-24T12:00:00")


def test_the_claim_is_told_which_windows_are_open_and_when_the_first_closed_one_opens():
    lunch = ProcessoLimits("lunch", time_windows="12:00-13:00 UTC")
    later = ProcessoLimits("later", time_windows="13:00-14:00 UTC\n15:00-16:00 UTC")
    plain = ProcessoLimits("plain", max_concurrent=1)
    open_hashes, known, opens_in = window_states([lunch, later, plain], NOW)
    assert open_hashes == [window_hash("lunch", "12:00-13:00 UTC")]
    assert known == [open_hashes[0], window_hash("later", "13:00-14:00 UTC\n15:00-16:00 UTC")]
    assert opens_in == 3600
    # The routine's md5(processo || chr(10) || time_windows), in both dialects.
    assert window_hash("p", "w") == hashlib.md5(b"p\nw").hexdigest()
    assert window_states([plain], NOW) == ([], [], None)


def test_disagreements_name_the_processo_and_both_declarations():
    mine = {"p": ProcessoLimits("p", max_concurrent=2)}
    theirs = {"p": ProcessoLimits("p", max_concurrent=3), "q": ProcessoLimits("q", 1)}
    [line] = disagreements(mine, theirs, handled={"p"})
    assert "'p'" in line and "max_concurrent=2" in line and "max_concurrent=3" in line
    assert disagreements(mine, theirs, handled={"p", "q"})[1].startswith("processo 'q'")
    assert disagreements(mine, dict(mine), handled={"p"}) == []


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("rate_limit", "5/x"),
        ("interval_s", (2, 1)),
        ("time_windows", "mon 08:00-09:00 No/Zone"),
        ("max_concurrent", 0),
        ("time_windows", ["mon 08:00-09:00"] * 21),
    ],
)
def test_the_decorator_names_the_processo_and_the_option(option, value):
    with pytest.raises(ValueError, match=rf"@Task\('nota'\): {option}"):
        Task("nota", **{option: value})


def test_limits_checked_again_at_start_name_the_processo_and_option():
    class Worker:
        @Task("nota", rate_limit="5/s")
        def on_nota(self, payload, tarefa, bd_conn): ...

    registry = TaskRegistry.of(Worker)
    assert checked_limits(registry)["nota"].rate_count == 5
    # Built around the decorator's check (say, a zone this machine lacks).
    object.__setattr__(registry.options["nota"], "rate_limit", "5/x")
    with pytest.raises(ValueError, match=r"@Task\('nota'\) rate_limit"):
        checked_limits(registry)


def test_a_worker_declaring_bad_limits_refuses_to_start_naming_processo_and_option(capsys):
    from nsj_queue_lib import Settings, WorkerBase

    class Billing(WorkerBase):
        @Task("nota", interval_s=(1, 2))
        def on_nota(self, payload, tarefa, bd_conn): ...

    object.__setattr__(Billing._task_registry.options["nota"], "interval_s", (3, 1))
    settings = Settings(
        db_host="127.0.0.1", db_name="test", db_user="postgres", queue_name="f", queue_table="f"
    )
    assert Billing(settings).run_until_stopped(install_signal_handlers=False) == 2
    assert "@Task('nota') interval_s min must be <= max" in capsys.readouterr().err


def test_limits_are_refused_where_the_database_has_no_limits_table():
    from nsj_queue_lib import Settings
    from nsj_queue_lib.runtime.worker_runtime import WorkerRuntime

    settings = Settings(
        db_driver="SINGLE_STORE",
        db_host="127.0.0.1",
        db_port=3306,
        db_name="test",
        db_user="root",
        queue_name="f",
        queue_table="f",
        client_server_mode=True,
    )
    limits = {"nota": ProcessoLimits("nota", max_concurrent=1)}
    with pytest.raises(ValueError, match="nota"):
        WorkerRuntime(settings, lambda tarefa, bd_conn: None, limits=limits)
    assert WorkerRuntime(settings, lambda tarefa, bd_conn: None).limiter is None


@pytest.mark.parametrize("value", [0, -1, True, False, 2.0, "2", 1_000_001, [2]])
def test_max_concurrent_per_key_must_be_a_positive_int(value):
    with pytest.raises(ValueError, match=r"@Task\('nota'\): max_concurrent_per_key must be"):
        Task("nota", max_concurrent_per_key=value)


def test_max_concurrent_per_key_alone_declares_limits_and_is_described():
    class Worker:
        @Task("nota", max_concurrent_per_key=2)
        def on_nota(self, payload, tarefa, bd_conn): ...

        @Task("other")
        def on_other(self, payload, tarefa, bd_conn): ...

    declared = checked_limits(TaskRegistry.of(Worker))
    assert declared == {"nota": ProcessoLimits("nota", max_concurrent_per_key=2)}
    assert declared["nota"].describe() == "max_concurrent_per_key=2"
    row = {"processo": "nota", "max_concurrent_per_key": 2, "max_concurrent": None}
    assert ProcessoLimits.from_row(row) == declared["nota"]
    mine = {"nota": ProcessoLimits("nota", max_concurrent=4, max_concurrent_per_key=2)}
    theirs = {"nota": ProcessoLimits("nota", max_concurrent=4, max_concurrent_per_key=3)}
    [line] = disagreements(mine, theirs, handled={"nota"})
    assert "max_concurrent_per_key=2" in line and "max_concurrent_per_key=3" in line
