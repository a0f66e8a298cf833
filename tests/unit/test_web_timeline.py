"""The task page's timeline of attempts (nsj_queue_lib/web/timeline.py)."""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib.web.timeline import MIN_BAR, WIDTH, durations, timeline

T0 = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.timezone.utc)


def at(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).isoformat()


def attempt(id, status, due, started=None, finished=None, worker="pod-a:1:x", tentativa=1):
    return dict(
        id=id,
        tentativa=tentativa,
        status=status,
        data_hora=at(due),
        started_at=None if started is None else at(started),
        finished_at=None if finished is None else at(finished),
        worker=worker if started is not None else None,
    )


def test_a_failure_then_a_retry_after_its_back_off_fill_the_span():
    attempts = [
        attempt(1, "falha", due=0, started=1, finished=3),
        attempt(2, "sucesso", due=6, started=8, finished=10, tentativa=2),
    ]
    shown = timeline(attempts, T0 + datetime.timedelta(seconds=60))
    assert shown is not None and shown.seconds == 10 and shown.start == at(0)
    first, second = shown.bars
    # Scaled to WIDTH over the 10 s span: waited 0-1 s, ran 1-3 s; waited 6-8 s, ran 8-10 s.
    assert (first.wait_x, first.wait_width, first.run_x, first.run_width) == (0, 60, 60, 120)
    assert (second.wait_x, second.wait_width, second.run_x, second.run_width) == (
        360,
        120,
        480,
        120,
    )
    assert (first.waited_s, first.ran_s, second.ran_s) == (1, 2, 2)
    assert second.y > first.y and shown.height > second.y
    assert first.worker == "pod-a:1:x" and first.status == "falha"


def test_a_running_attempt_runs_until_now_and_a_waiting_one_waits_until_now():
    now = T0 + datetime.timedelta(seconds=4)
    running = attempt(1, "processando", due=0, started=2)
    assert durations(running, now) == (2, 2)
    bar = timeline([running], now).bars[0]
    assert bar.run_x == WIDTH / 2 and bar.run_width == WIDTH / 2
    waiting = attempt(2, "pendente", due=1)
    bars = timeline([running, waiting], now).bars
    assert bars[1].run_width is None and bars[1].wait_x == WIDTH / 4
    assert bars[1].wait_width == pytest.approx(WIDTH * 3 / 4)


def test_a_quick_attempt_still_shows_and_a_retry_due_later_shows_nothing_yet():
    now = T0 + datetime.timedelta(seconds=100)
    quick = attempt(1, "falha", due=0, started=0, finished=0.001)
    later = attempt(2, "agendada", due=200, tentativa=2)
    bars = timeline([quick, later], now).bars
    assert bars[0].run_width == MIN_BAR
    assert bars[1].run_width is None and bars[1].wait_width is None


def test_rows_of_1_2_2_workers_have_no_timeline():
    old = dict(id=1, tentativa=1, status="sucesso", data_hora=at(0))
    assert timeline([old], T0) is None
    assert durations(old, T0) == (None, None)
