"""Wake-ups by polling, for databases without LISTEN/NOTIFY (MySQL, MariaDB).

Every ``interval`` seconds the dispatcher is told "there may be work" and an
executor tries one claim (an index lookup that finds nothing when idle).
"""

from __future__ import annotations

import select


class PollingListener:
    def __init__(self, interval: float):
        self.interval = interval

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        wait = max(0.0, min(timeout, self.interval))
        readable, _, _ = select.select([interrupt_fd], [], [], wait)
        if readable:
            return []  # interrupted: the dispatcher checks its stop flag
        return [""] if wait < timeout else []
