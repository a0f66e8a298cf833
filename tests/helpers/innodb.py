"""Reads of ``information_schema.innodb_trx`` that see the server's present.

InnoDB refreshes that table's cache only when nobody has read it for 0.1 s. Tests
on several xdist workers polling it at once (each every 0.25 s) kept it from ever
refreshing: four such tests of one run each waited 20 s for a lock wait they never
saw. These reads take turns across the suite's processes (a file lock) and come at
least 0.11 s after the previous one.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

_TURN = os.path.join(tempfile.gettempdir(), "nsj-queue-lib-tests-innodb-trx.lock")
_IDLE_SECONDS = 0.11


def fresh_read(read: Callable[[], Any]) -> Any:
    """``read()`` (a query of innodb_trx) once the table's cache will be refreshed for it."""
    with open(_TURN, "a+") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            turn.seek(0)
            text = turn.read().strip()
            last = float(text) if text else 0.0
            time.sleep(max(0.0, last + _IDLE_SECONDS - time.time()))
            result = read()
            turn.seek(0)
            turn.truncate()
            turn.write(repr(time.time()))
            turn.flush()
            return result
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
