"""What a CLIENT_SERVER_MODE worker keeps open to the socket server besides its wake-ups:
its lock client (liveness and maintenance locks, not the database's session locks) and,
with it, the announcer of its task ends to ``wait_for_task``'s waiters."""

from __future__ import annotations

import os
import socket
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsj_queue_lib.client.lock_client import LockClient
    from nsj_queue_lib.settings import Settings
    from nsj_queue_lib.workflow.server_ends import EndAnnouncer


def lock_client(settings: Settings) -> LockClient | None:
    """The worker's lock client, not connected yet; None outside CLIENT_SERVER_MODE."""
    if not settings.client_server_mode:
        return None
    from nsj_queue_lib.client.lock_client import LockClient

    name = f"{settings.queue_name}:{socket.gethostname()}:{os.getpid()}:locks"
    return LockClient.from_settings(settings, name, connect=False)


def end_announcer(
    settings: Settings, locks: LockClient | None, stop: threading.Event
) -> EndAnnouncer | None:
    """The task ends' announcer (workflow/server_ends.py) over ``locks``; None without."""
    if locks is None:
        return None
    from nsj_queue_lib.workflow.server_ends import EndAnnouncer

    return EndAnnouncer(settings.queue_table, locks, stop)
