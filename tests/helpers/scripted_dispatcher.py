"""A dispatcher (runtime/dispatcher.py) run against a script: what its listener hears in
turn, and a fake store; for the pure unit tests of its wake-ups and plans."""

from __future__ import annotations

import threading
from typing import Any

from nsj_queue_lib.runtime.dispatcher import Dispatcher
from nsj_queue_lib.settings import Settings

WAIT_NOTIFY_INTERVAL = 30.0


class ScriptedListener:
    """Answers the dispatcher's waits from a script; records the timeouts it was given.
    Stops the dispatcher when the script ends."""

    def __init__(self, script: list[list[str]], stop: threading.Event):
        self.script = script
        self.timeouts: list[float] = []
        self.stop = stop

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        self.timeouts.append(timeout)
        if not self.script:
            self.stop.set()
            return []
        return self.script.pop(0)


def run_dispatcher(
    store: Any, script: list[list[str]], concurrency: int, notifies: bool = False
) -> tuple[list[float], list[int]]:
    """Run a dispatcher over ``store`` until ``script`` ends: the timeouts of its waits and
    the wake-ups it gave (how many executors each)."""
    settings = Settings(
        db_host="h",
        db_name="d",
        db_user="u",
        queue_name="q",
        queue_table="q",
        queue_concurrency=concurrency,
        queue_wait_notify_interval=WAIT_NOTIFY_INTERVAL,
    )
    stop = threading.Event()
    listener = ScriptedListener(script, stop)
    wakes: list[int] = []
    Dispatcher(
        settings,
        store,
        wakes.append,
        connect=lambda: None,
        listener=listener,
        is_outage=lambda exc: False,
        stop=stop,
        on_halt=lambda: None,
        notifies=notifies,
    ).run()
    return listener.timeouts, wakes
