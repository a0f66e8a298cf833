"""The circuit breaker's decisions (fleet/breakers.py), pure: while the breaker is open only
the trial task's outcome decides; a trial undecided past its bound counts as lost; and
which outcomes the recorder queues as what (fleet/breaker_recorder.py)."""

from __future__ import annotations

from nsj_queue_lib.fleet import breaker_recorder as recorder_module
from nsj_queue_lib.fleet.breaker_recorder import BreakerRecorder
from nsj_queue_lib.fleet.breakers import (
    UNTIMED_TRIAL_BOUND_S,
    BreakerState,
    Decision,
    after_failure,
    after_success,
    trial_bound_s,
    trial_lost,
)
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability import observer as outcomes
from nsj_queue_lib.settings import Settings

TRIAL = BreakerState("p", 0, True, True, trial_task=7, trial_age_s=1.0)
COOLING = BreakerState("p", 0, True, False)


def test_while_open_only_the_trial_task_decides():
    assert after_success(TRIAL, 7) == Decision.CLOSE
    assert after_failure(TRIAL, 3, 7) == Decision.OPEN
    # A task claimed before the breaker opened, ending during the trial.
    assert after_success(TRIAL, 6) == Decision.NOTHING
    assert after_failure(TRIAL, 3, 6) == Decision.NOTHING
    # During the cool-down nothing decides.
    assert after_success(COOLING, 7) == Decision.NOTHING
    assert after_failure(COOLING, 3, 7) == Decision.NOTHING


def test_while_closed_failures_count_to_the_threshold_and_a_success_resets():
    assert after_failure(BreakerState("p", 2, False, False), 3, 1) == Decision.NOTHING
    assert after_failure(BreakerState("p", 3, False, False), 3, 1) == Decision.OPEN
    assert after_success(BreakerState("p", 2, False, False), 1) == Decision.CLOSE
    assert after_success(BreakerState("p", 0, False, False), 1) == Decision.NOTHING


def test_a_trial_is_lost_past_cool_down_timeout_and_grace():
    assert trial_bound_s(60, 30, 5) == 95
    assert trial_bound_s(60, None, 5) == 60 + UNTIMED_TRIAL_BOUND_S
    assert not trial_lost(BreakerState("p", 0, True, True, trial_task=7, trial_age_s=95), 95)
    assert trial_lost(BreakerState("p", 0, True, True, trial_task=7, trial_age_s=95.5), 95)
    assert not trial_lost(BreakerState("p", 0, True, False, trial_age_s=500), 95)


def task(task_id: int, processo: str = "p", dead: bool = False) -> TaskRecord:
    row = {"id": task_id, "processo": processo, "dead": dead, "tentativa": 1, "payload": "x"}
    return TaskRecord.from_row(row)


def recorder_of(breakers) -> BreakerRecorder:
    settings = Settings(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q")
    return BreakerRecorder(settings, breakers, lambda: None, lambda processo: None)


def test_the_recorder_queues_successes_failures_and_undecided_ends():
    recorder = recorder_of({"p": (3, 60.0)})
    recorder.task_finished(task(1), outcomes.SUCESSO)
    recorder.task_finished(task(2), outcomes.FALHA)
    recorder.task_finished(task(3), outcomes.RESCUED)
    recorder.task_finished(task(4), outcomes.CANCELADA)
    recorder.task_finished(task(5), outcomes.RELEASED)
    recorder.attempt_abandoned(task(6), "given up after its timeout")
    recorder.task_finished(task(7, processo="other"), outcomes.FALHA)  # no breaker
    recorder.task_finished(task(8, dead=True), outcomes.FALHA)  # execute_dead's
    queued = []
    while not recorder._events.empty():
        queued.append(recorder._events.get_nowait())
    assert queued == [
        ("p", 1, recorder_module.SUCCESS),
        ("p", 2, recorder_module.FAILURE),
        ("p", 3, recorder_module.FAILURE),
        ("p", 4, recorder_module.UNDECIDED),
        ("p", 5, recorder_module.UNDECIDED),
        ("p", 6, recorder_module.UNDECIDED),
    ]


def test_the_recorder_writes_what_is_queued_before_it_ends():
    recorder = recorder_of({"p": (3, 60.0)})
    written = []
    recorder.record_once = written.append  # type: ignore[method-assign]
    recorder.task_finished(task(1), outcomes.SUCESSO)
    recorder.finish()
    recorder.run()
    assert ("p", 1, recorder_module.SUCCESS) in written
