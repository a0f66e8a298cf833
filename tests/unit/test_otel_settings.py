"""QUEUE_OTEL and its companions: read from the environment, and which observers a worker gets."""

from __future__ import annotations

import sys

import pytest

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.observability.assembly import Observers, attempt_tracer, observed
from nsj_queue_lib.observability.observer import NULL_OBSERVER, Observer
from nsj_queue_lib.settings import Settings
from tests.helpers.otel import require_otel
from tests.unit.test_settings import MINIMAL, config_error, env


def settings(**changes) -> Settings:
    return Settings.from_env(MINIMAL).with_changes(**changes)


def test_the_variables_and_their_defaults():
    default = Settings.from_env(MINIMAL)
    assert (default.queue_otel, default.queue_otel_claim_spans, default.queue_otel_link_only) == (
        None,
        False,
        False,
    )
    on = Settings.from_env(
        env(QUEUE_OTEL="true", QUEUE_OTEL_CLAIM_SPANS="yes", QUEUE_OTEL_LINK_ONLY="1")
    )
    assert (on.queue_otel, on.queue_otel_claim_spans, on.queue_otel_link_only) == (True, True, True)
    assert Settings.from_env(env(QUEUE_OTEL="false")).queue_otel is False
    assert "QUEUE_OTEL" in config_error(env(QUEUE_OTEL="sometimes")).problems


def test_off_builds_nothing_and_unset_follows_the_installed_api(monkeypatch):
    assert attempt_tracer(settings(queue_otel=False)) is None
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert attempt_tracer(settings()) is None  # unset, and no API installed


def test_required_without_the_api_stops_the_worker(monkeypatch):
    monkeypatch.setitem(sys.modules, "nsj_queue_lib.observability.tracing", None)  # ImportError
    with pytest.raises(ConfigError) as info:
        attempt_tracer(settings(queue_otel=True))
    assert "nsj-queue-lib[otel]" in info.value.problems["QUEUE_OTEL"]


def test_on_builds_the_tracer_with_its_options():
    require_otel()  # skipped without the otel extra, failed under CI=true
    tracer = attempt_tracer(settings(queue_otel=True, queue_otel_claim_spans=True))
    assert tracer is not None and tracer.claim_spans and tracer.measures_round_trips


def test_without_observers_the_handler_runs_unwrapped():
    def handler(row, conn):
        return None

    assert observed(handler, None, None) == (handler, NULL_OBSERVER)


def test_several_observers_hear_every_report():
    heard = []

    class Recording(Observer):
        measures_round_trips = True

        def task_finished(self, task, outcome):
            heard.append((self, outcome))

        def attempt_abandoned(self, task, why):
            heard.append((self, why))

    first, second = Recording(), Observer()
    both = Observers([first, second])
    assert both.measures_round_trips
    both.task_finished(None, "sucesso")
    both.attempt_abandoned(None, "rescued")
    assert heard == [(first, "sucesso"), (first, "rescued")]
