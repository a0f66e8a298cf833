"""``/healthz`` and ``/readyz``: what they check, as documents (docs/metrics.md).

- Liveness (``/healthz``) never touches the database: the worker's supervised
  threads (dispatcher, services, executors, depth sampler) are alive. A worker
  still waiting for its database at start, or stopping, is alive, unless it
  stops because one of those threads died of an error.
- Readiness (``/readyz``): the worker is not stopping, the dispatcher's
  connection (LISTEN, polling or the socket server, with its database
  connection) is up, and its loop completed a round trip less than
  ``stale_after`` seconds ago. The loop queries the database at least every
  QUEUE_WAIT_NOTIFY_INTERVAL, so the runtime sets ``stale_after`` to that plus
  a margin: a dispatcher stuck longer than that is not ready.

Every ``/readyz`` document but "stopping" also says how the worker learns of new tasks
(``wakeups``: ``{"mode": "listen"|"poll"|"server"}``, with a ``reason`` when
a deaf LISTEN made it poll). Polling alone never makes a worker unready: it
still claims every task, only later (up to QUEUE_POLL_INTERVAL); the warning
in the log and this field say why, for an operator to act on.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

from nsj_queue_lib.observability.measured import Contact

READY_MARGIN_SECONDS = 30.0


@dataclasses.dataclass(frozen=True)
class Verdict:
    ok: bool
    document: dict[str, Any]


class Health:
    def __init__(self, stop: threading.Event, contact: Contact, stale_after: float):
        self._stop = stop
        self._contact = contact
        self.stale_after = stale_after
        self._threads: Sequence[threading.Thread] = ()
        self._more_dead: Callable[[], Sequence[threading.Thread]] = list
        self.wakeups: Callable[[], dict[str, str]] | None = None  # set by the runtime

    def watch(
        self,
        threads: Sequence[threading.Thread],
        more_dead: Callable[[], Sequence[threading.Thread]] = list,
    ) -> None:
        """The supervised threads, and a callable naming more that died (the executors')."""
        self._threads = threads
        self._more_dead = more_dead

    def liveness(self) -> Verdict:
        stopping = self._stop.is_set()
        # Threads end when the worker stops; one that died of an error (``error``, set by the
        # runtime's supervised threads) stays a failure while the worker stops because of it.
        dead = [
            t.name
            for t in self._threads
            if not t.is_alive() and (not stopping or getattr(t, "error", None) is not None)
        ]
        if not stopping:
            dead += [t.name for t in self._more_dead()]
        if dead:
            return Verdict(False, {"status": "unhealthy", "dead_threads": dead})
        if stopping:
            return Verdict(True, {"status": "stopping"})
        return Verdict(True, {"status": "ok" if self._threads else "starting"})

    def readiness(self) -> Verdict:
        verdict = self._readiness()
        if self.wakeups is None or self._stop.is_set():
            return verdict
        return Verdict(verdict.ok, {**verdict.document, "wakeups": self.wakeups()})

    def _readiness(self) -> Verdict:
        if self._stop.is_set():
            return Verdict(False, {"status": "stopping"})
        if not self._contact.connected:
            return Verdict(
                False,
                {"status": "not ready", "reason": "not connected to the database or socket server"},
            )
        age = self._contact.seconds_since_ok()
        if age is None or age > self.stale_after:
            return Verdict(
                False,
                {
                    "status": "not ready",
                    "reason": f"no round trip with the database for more than "
                    f"{self.stale_after:g} s",
                },
            )
        return Verdict(True, {"status": "ready", "seconds_since_round_trip": round(age, 3)})
