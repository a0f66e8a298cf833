"""LISTEN that checks it really hears, and falls back to polling when it does not.

A LISTEN behind a pooler in transaction mode succeeds and then hears nothing:
without a check, every wake-up would be lost and new tasks would wait for the
dispatcher's QUEUE_WAIT_NOTIFY_INTERVAL round. So at every ``open`` (start
and each reconnect) and, while no notification arrives, every
``PROBE_QUIET_SECONDS``, a NOTIFY is sent from another connection and awaited
on the listening one. When it does not arrive the listener says why, once per
change, and polls every QUEUE_POLL_INTERVAL until a later probe finds LISTEN
working again, or the LISTEN connection turns out to have heard something (a
probe answered late on a loaded machine). What a probe hears besides its own
NOTIFY (a HALT) is delivered, never dropped.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Protocol

from nsj_queue_lib.log import get_logger
from nsj_queue_lib.notify.polling import PollingListener

logger = get_logger("wakeups")

PROBE_PREFIX = "nsjq-probe:"  # payloads every dispatcher ignores (other workers see them too)
PROBE_TIMEOUT_SECONDS = 1.0  # a NOTIFY arrives within milliseconds where LISTEN works
PROBE_QUIET_SECONDS = 300.0

DEAF_REASON = "deaf LISTEN detected"


class ProbedListener(Protocol):
    def open(self) -> None: ...

    def close(self) -> None: ...

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]: ...

    def probe(self, token: str, timeout: float) -> tuple[bool, list[str]]: ...


def is_probe(payload: str) -> bool:
    return payload.startswith(PROBE_PREFIX)


class CheckedListener:
    """The dispatcher's listener in QUEUE_WAKEUP=listen: ``mode`` is "listen" or "poll"."""

    def __init__(self, inner: ProbedListener, poll_interval: float, queue_name: str):
        self._inner = inner
        self._polling = PollingListener(poll_interval)
        self._queue_name = queue_name
        self._lock = threading.Lock()
        self._deaf = False
        self._warned = False
        self._last_heard = time.monotonic()
        # Payloads heard while a probe waited for its own (a HALT sent just after LISTEN,
        # while the probe's connection was being made): delivered by the next wait.
        self._heard: list[str] = []

    @property
    def mode(self) -> str:
        return "poll" if self._deaf else "listen"

    def state(self) -> dict[str, str]:
        """For /readyz: the mode in use, and why when it is not the one chosen."""
        with self._lock:
            if self._deaf:
                return {"mode": "poll", "reason": DEAF_REASON}
            return {"mode": "listen"}

    def open(self) -> None:
        self._inner.open()
        self._check()

    def close(self) -> None:
        self._inner.close()

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        if self._heard:
            heard, self._heard = self._heard, []
            return heard
        if self._deaf:
            # The LISTEN connection stays open (probed again now and then) and is not
            # waited on; what it received is looked at once per poll, without waiting.
            if time.monotonic() - self._last_heard >= PROBE_QUIET_SECONDS:
                self._check()
            late = self._inner.wait(0.0, interrupt_fd)
            if late:
                # It hears after all: a probe answered after PROBE_TIMEOUT_SECONDS (a
                # loaded machine). Polling on would lose a HALT until the next probe.
                self._hears_again()
                return [p for p in late if not is_probe(p)] or [""]
            return self._polling.wait(timeout, interrupt_fd)
        payloads = [p for p in self._inner.wait(timeout, interrupt_fd) if not is_probe(p)]
        now = time.monotonic()
        if payloads:
            self._last_heard = now
        elif now - self._last_heard >= PROBE_QUIET_SECONDS:
            self._check()
            if self._deaf:
                return [""]  # polling from now on: look for work at once
        return payloads

    def _check(self) -> None:
        heard, others = self._inner.probe(
            f"{PROBE_PREFIX}{secrets.token_hex(8)}", PROBE_TIMEOUT_SECONDS
        )
        # Payloads received during the probe are delivered: a wake-up would be harmless to
        # lose (after open the dispatcher looks at everything), a HALT would not.
        self._heard += [p for p in others if not is_probe(p)]
        with self._lock:
            self._deaf = not heard
            self._last_heard = time.monotonic()
        if heard:
            self._hears_again()
            return
        if not self._warned:
            logger.warning(
                "queue=%s: %s: a NOTIFY sent from another connection never reached this "
                "worker's LISTEN. The likely cause is a connection pooler in transaction mode "
                "(PgBouncer pool_mode = transaction, RDS Proxy, Supavisor), which does not keep "
                "LISTEN. Polling every %g s (QUEUE_POLL_INTERVAL) instead. Remedies: connect "
                "the worker directly or through a session-mode pool, use the socket server "
                "(CLIENT_SERVER_MODE=true), or set QUEUE_WAKEUP=poll to choose polling "
                "(docs/how-to/poolers.md)",
                self._queue_name,
                DEAF_REASON,
                self._polling.interval,
            )
            self._warned = True

    def _hears_again(self) -> None:
        with self._lock:
            self._deaf = False
            self._last_heard = time.monotonic()
        if self._warned:
            logger.info("queue=%s: LISTEN receives again; wake-ups: listen", self._queue_name)
            self._warned = False
