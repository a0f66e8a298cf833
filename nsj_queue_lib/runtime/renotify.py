"""Renotify service: due scheduled rows become 'pendente' and the workers are woken.

Also wakes them when a 'pendente' row has waited longer than
QUEUE_WAIT_NOTIFY_INTERVAL: a notification lost while no worker listened.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.dialect import notify_channel
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.service import PeriodicService

logger = get_logger("renotify")

BATCH = 1000


class RenotifyService(PeriodicService):
    name = "renotify"

    def work(self, conn: Any) -> int:
        promoted = 0
        while not self.stop.is_set():
            count = self.store.promote_due(conn, BATCH)
            conn.commit()
            promoted += count
            if count < BATCH:
                break
        stale = self.store.has_stale_pending(conn, self.settings.queue_wait_notify_interval)
        if promoted or stale:
            self.store.notify(conn, notify_channel(self.settings.queue_name), "")
            logger.info(
                "queue=%s: woke the workers (promoted=%d, waiting tasks=%s)",
                self.settings.queue_name,
                promoted,
                stale,
            )
        conn.commit()
        return promoted
