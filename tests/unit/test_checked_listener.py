"""notify/checked.py: a LISTEN that checks it hears, and polls while it does not.

The LISTEN connection is a stand-in here (the real one, behind a real PgBouncer,
is tested in tests/acceptance/test_pooler.py): it hears its probes or not, as told.
"""

from __future__ import annotations

import logging
import os

import pytest

from nsj_queue_lib.notify import checked
from nsj_queue_lib.notify.checked import DEAF_REASON, PROBE_PREFIX, CheckedListener


class StandInListen:
    def __init__(self, hears: bool):
        self.hears = hears
        self.probes: list[str] = []
        self.pending: list[str] = []
        self.opened = 0

    def open(self) -> None:
        self.opened += 1

    def close(self) -> None:
        pass

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        payloads, self.pending = self.pending, []
        return payloads

    def probe(self, token: str, timeout: float) -> tuple[bool, list[str]]:
        self.probes.append(token)
        return self.hears, []


@pytest.fixture
def pipe():
    read, write = os.pipe()
    yield read
    os.close(read)
    os.close(write)


def test_a_listen_that_hears_stays_listen_and_hides_probes(pipe, caplog):
    inner = StandInListen(hears=True)
    listener = CheckedListener(inner, 0.01, "fila")
    listener.open()
    assert inner.probes and inner.probes[0].startswith(PROBE_PREFIX)
    assert listener.mode == "listen" and listener.state() == {"mode": "listen"}
    inner.pending = [f"{PROBE_PREFIX}other-worker", "", "scheduled"]
    assert listener.wait(1.0, pipe) == ["", "scheduled"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_deaf_listen_warns_once_and_polls(pipe, caplog):
    inner = StandInListen(hears=False)
    listener = CheckedListener(inner, 0.01, "fila")
    with caplog.at_level(logging.INFO, logger="nsj_queue_lib"):
        listener.open()
        listener.open()  # a reconnect, still deaf: no second warning
    assert listener.state() == {"mode": "poll", "reason": DEAF_REASON}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "queue=fila" in warnings[0] and "transaction mode" in warnings[0]
    assert "QUEUE_POLL_INTERVAL" in warnings[0] and "QUEUE_WAKEUP=poll" in warnings[0]
    assert listener.wait(1.0, pipe) == [""]  # a poll, after QUEUE_POLL_INTERVAL
    assert listener.mode == "poll"


def test_a_listen_found_deaf_that_hears_later_listens_again(pipe, caplog):
    # Its probe's answer came after PROBE_TIMEOUT_SECONDS (a loaded machine): polling on,
    # the worker would not hear a HALT until the next probe, minutes later.
    inner = StandInListen(hears=False)
    listener = CheckedListener(inner, 0.01, "fila")
    listener.open()
    assert listener.mode == "poll"
    inner.pending = [f"{PROBE_PREFIX}late", "HALT"]
    with caplog.at_level(logging.INFO, logger="nsj_queue_lib"):
        assert listener.wait(1.0, pipe) == ["HALT"]
    assert listener.mode == "listen"
    assert any("LISTEN receives again" in r.getMessage() for r in caplog.records)


def test_a_quiet_listen_is_probed_again_and_may_recover(pipe, caplog, monkeypatch):
    inner = StandInListen(hears=True)
    listener = CheckedListener(inner, 0.01, "fila")
    listener.open()
    monkeypatch.setattr(checked, "PROBE_QUIET_SECONDS", 0.0)
    inner.hears = False
    assert listener.wait(0.5, pipe) == [""]  # deaf now: look for work at once
    assert listener.mode == "poll"
    inner.hears = True
    with caplog.at_level(logging.INFO, logger="nsj_queue_lib"):
        listener.wait(0.5, pipe)
    assert listener.mode == "listen"
    assert any("LISTEN receives again" in r.getMessage() for r in caplog.records)
    assert len(inner.probes) == 3


def test_what_a_probe_hears_besides_its_own_is_delivered(pipe):
    # A HALT sent right after LISTEN, while the probe waited for its own NOTIFY (its
    # connection slow to be made on a loaded machine), used to be dropped: the worker
    # never stopped.
    inner = StandInListen(hears=True)
    inner.probe = lambda token, timeout: (True, ["HALT", f"{PROBE_PREFIX}other-worker"])
    listener = CheckedListener(inner, 0.01, "fila")
    listener.open()
    inner.pending = ["later"]
    assert listener.wait(1.0, pipe) == ["HALT"]
    assert listener.wait(1.0, pipe) == ["later"]
