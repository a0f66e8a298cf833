"""Periodic tasks (docs/periodic-tasks.md): options and slot arithmetic (pure)."""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib import Task, WorkerBase
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.flow.periodic import PeriodicSchedule, schedule_problem, slot_key
from nsj_queue_lib.worker_base import EXIT_CONFIG_ERROR
from tests.unit.test_task_routing import run_worker_code

UTC = datetime.timezone.utc


def at(*args: int, tz: datetime.tzinfo = UTC) -> datetime.datetime:
    return datetime.datetime(*args, tzinfo=tz)


def test_cron_slots_fall_on_the_expression_in_utc():
    s = PeriodicSchedule("p", cron="*/5 * * * *")
    assert s.latest_due(at(2026, 11, 24, 8, 47, 13)) == at(2026, 11, 24, 8, 45)
    # A slot is due from its first microsecond on, not a moment before.
    assert s.latest_due(at(2026, 11, 24, 8, 45)) == at(2026, 11, 24, 8, 45)
    before = at(2026, 11, 24, 8, 45) - datetime.timedelta(microseconds=1)
    assert s.latest_due(before) == at(2026, 11, 24, 8, 40)
    assert s.next_after(at(2026, 11, 24, 8, 45)) == at(2026, 11, 24, 8, 50)
    assert s.next_after(before) == at(2026, 11, 24, 8, 45)
    # Any aware clock gives the same slots.
    brt = datetime.timezone(datetime.timedelta(hours=-3))
    assert s.latest_due(at(2026, 11, 24, 5, 47, tz=brt)) == at(2026, 11, 24, 8, 45)


def test_cron_tz_reads_the_expression_in_that_zone_across_offset_changes():
    s = PeriodicSchedule("p", cron="0 9 * * *", cron_tz="Europe/Berlin")
    assert s.latest_due(at(2026, 1, 15, 12)) == at(2026, 1, 15, 8)  # CET, UTC+1
    assert s.latest_due(at(2026, 7, 15, 12)) == at(2026, 7, 15, 7)  # CEST, UTC+2
    assert s.next_after(at(2026, 3, 28, 9)) == at(2026, 3, 29, 7)  # the night the clocks move


def test_every_s_slots_count_from_the_unix_epoch():
    s = PeriodicSchedule("p", every_s=300)
    cron = PeriodicSchedule("p", cron="*/5 * * * *")
    for now in (at(2026, 11, 24, 8, 47, 13), at(2026, 11, 24, 8, 45), at(2026, 11, 24, 23, 59, 59)):
        assert s.latest_due(now) == cron.latest_due(now)
        assert s.next_after(now) == cron.next_after(now)
    seven = PeriodicSchedule("p", every_s=7)
    now = at(2026, 11, 24, 8, 45)
    assert slot_key(seven.latest_due(now)) % 7 == 0
    assert seven.latest_due(now) <= now < seven.next_after(now)
    assert (seven.next_after(now) - seven.latest_due(now)).total_seconds() == 7


def test_the_payload_is_the_slot_and_the_fixed_keys():
    s = PeriodicSchedule("p", every_s=60, payload={"tenant": 7})
    assert s.task_payload(at(2026, 11, 24, 8, 45)) == {
        "tenant": 7,
        "slot": "2026-11-24T08:45:00+00:00",
    }
    assert slot_key(at(1970, 1, 1, 0, 1)) == 60


@pytest.mark.parametrize(
    ("options", "option", "why"),
    [
        (dict(cron="*/5 * * *"), "cron", "not a valid cron expression"),
        (dict(cron="61 * * * *"), "cron", "not a valid cron expression"),
        (dict(cron=""), "cron", "must be a cron expression"),
        (dict(cron="* * * * *", cron_tz="Mars/Olympus"), "cron_tz", "unknown time zone"),
        (dict(cron="* * * * *", every_s=60), "every_s", "cannot be given with cron"),
        (dict(every_s=0), "every_s", "between 1 and"),
        (dict(every_s=1.5), "every_s", "whole number"),
        (dict(every_s=60, cron_tz="UTC"), "cron_tz", "applies to cron only"),
        (dict(cron_tz="UTC"), "cron_tz", "needs cron or every_s"),
        (dict(every_s=60, cron_payload={"slot": 1}), "cron_payload", "cannot hold the key"),
        (dict(every_s=60, cron_payload=[1]), "cron_payload", "must be a dict"),
        (dict(every_s=60, cron_payload={"x": object()}), "cron_payload", "cannot be stored"),
    ],
)
def test_bad_periodic_options_are_value_errors_naming_processo_and_option(options, option, why):
    with pytest.raises(ValueError, match=rf"^@Task\('tick'\): {option} .*{why}"):
        Task("tick", **options)


def test_a_registry_gives_the_periodic_processos_only():
    class Ticker(WorkerBase):
        @Task("tick", cron="0 * * * *", cron_tz="America/Sao_Paulo")
        def tick(self, payload, tarefa, bd_conn):
            return "tick"

        @Task("tock", every_s=5, cron_payload={"a": 1})
        @Task("plain")
        def tock(self, payload, tarefa, bd_conn):
            return "tock"

    schedules = {s.processo: s for s in Ticker.periodic_schedules()}
    assert set(schedules) == {"tick", "tock"}
    assert schedules["tick"].describe() == "cron '0 * * * *' (America/Sao_Paulo)"
    assert schedules["tock"].describe() == "every 5 s"


def test_a_worker_refuses_periodic_options_that_escaped_the_decorator():
    class Ticker(WorkerBase):
        @Task("tick", every_s=5)
        def tick(self, payload, tarefa, bd_conn):
            return "tick"

    # As if built elsewhere: the frozen options are changed behind the decorator's back.
    object.__setattr__(Ticker._task_registry.options["tick"], "every_s", -1)
    with pytest.raises(ConfigError) as raised:
        Ticker.periodic_schedules()
    assert raised.value.problems == {
        "@Task('tick')": "every_s must be between 1 and 31622400, got -1"
    }


def test_schedule_problem_accepts_what_task_accepts():
    assert schedule_problem("0 3 * * mon-fri", "America/Sao_Paulo", None, {"k": [1]}) is None
    assert schedule_problem(None, None, 86400, None) is None
    assert schedule_problem(None, None, None, None) is None


BAD_ZONE_WORKER = """
from nsj_queue_lib import Task, WorkerBase

class Ticker(WorkerBase):
    @Task("tick", every_s=5)
    def tick(self, payload, tarefa, bd_conn):
        return "never runs"

object.__setattr__(Ticker._task_registry.options["tick"], "cron_tz", "Mars/Olympus")
Ticker().run()
"""


def test_a_worker_with_a_bad_periodic_option_exits_with_code_2_naming_it():
    done = run_worker_code(BAD_ZONE_WORKER)
    assert done.returncode == EXIT_CONFIG_ERROR, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "nsj_queue_lib: configuration error: @Task('tick') cron_tz applies to cron only "
        "(every_s counts from the Unix epoch)"
    )


def test_a_wall_clock_time_that_repeats_or_is_skipped_gives_one_slot():
    """The enqueuer takes a slot only when it is later than the last one taken: replay the
    nights the clocks move, minute by minute, and count the slots taken."""
    s = PeriodicSchedule("p", cron="30 2 * * *", cron_tz="Europe/Berlin")
    for start in (at(2026, 3, 28, 22), at(2026, 10, 24, 22)):  # spring forward, fall back
        taken = [s.latest_due(start)]
        for minute in range(6 * 60):
            slot = s.latest_due(start + datetime.timedelta(minutes=minute))
            if slot > taken[-1]:
                taken.append(slot)
        assert len(taken) == 2, taken


def continuous_slots(s: PeriodicSchedule, start: datetime.datetime, hours: int) -> list:
    """The schedule's slots in UTC, walked forward without a break from well before
    ``start`` (how cronsim runs it): the reference for the slot arithmetic."""
    import cronsim

    walk = cronsim.CronSim(s.cron, (start - datetime.timedelta(days=2)).astimezone(s.zone))
    slots = []
    for slot in walk:
        slots.append(slot.astimezone(UTC))
        if slots[-1] > start + datetime.timedelta(days=2, hours=hours):
            return slots
    raise AssertionError("a schedule without slots")


@pytest.mark.parametrize("cron", ["*/15 * * * *", "30 1 * * *", "* * * * *", "0 2 * * *"])
@pytest.mark.parametrize(
    "zone, start",
    [
        ("America/New_York", at(2026, 11, 1, 4)),  # 02:00 EDT -> 01:00 EST at 06:00 UTC
        ("Europe/Berlin", at(2026, 10, 25, 0)),  # 03:00 CEST -> 02:00 CET at 01:00 UTC
        ("Australia/Lord_Howe", at(2026, 4, 4, 13)),  # back by 30 minutes
        ("America/New_York", at(2026, 3, 8, 5)),  # spring forward
    ],
)
def test_slots_across_the_nights_clocks_move_match_the_schedule_run_forward(cron, zone, start):
    """The night clocks go back, latest_due gave a slot 46 minutes ahead (taking it early
    and skipping the repeated hour's slots) and next_after one in the past (a busy loop)."""
    import bisect

    s = PeriodicSchedule("p", cron=cron, cron_tz=zone)
    slots = continuous_slots(s, start, 4)
    for step in range(4 * 60 * 2):
        now = start + datetime.timedelta(seconds=30 * step)
        i = bisect.bisect_right(slots, now)
        assert (s.latest_due(now), s.next_after(now)) == (slots[i - 1], slots[i]), now
