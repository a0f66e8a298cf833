"""What a worker's dispatcher waits on: the socket server, polling, or the database's LISTEN.

Apart from ``db/driver.py`` because the socket server's listener reads the
settings, and the settings read ``db/driver.py``'s table of databases.
"""

from __future__ import annotations

from nsj_queue_lib.db.driver import Driver, Listener
from nsj_queue_lib.notify.polling import PollingListener
from nsj_queue_lib.notify.server_listener import ServerListener


class WakeupDriver(Driver):
    """A driver whose listener follows QUEUE_WAKEUP (``Driver.wakeup_mode``)."""

    def listener(self) -> Listener:
        """What the dispatcher waits on, by ``wakeup_mode``: the socket server, polling every
        QUEUE_POLL_INTERVAL, or the database's LISTEN, checked (``notify/checked.py``)."""
        mode = self.wakeup_mode()
        if mode == "server":
            return ServerListener(self.settings)
        if mode == "poll":
            return PollingListener(self.settings.queue_poll_interval)
        return self.native_listener()
