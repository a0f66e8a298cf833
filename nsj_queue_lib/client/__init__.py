"""Clients of the socket server (client/server mode).

- ``LockClient``: named try-locks owned by the client's connection
  (``try_lock``, ``unlock``, ``held``), thread-safe.
- ``NotifyClient``: subscribe to queues and read the wake-ups the server
  pushes (``subscribe``, ``wait``/``fileno``/``read_notifications``,
  ``notify``).

Both authenticate with ``QUEUE_SERVER_TOKEN`` when they connect, raise
``ServerConnectionError`` when the connection is lost, and offer
``reconnect()`` with back-off. Wire format: ``nsj_queue_lib.protocol``.
"""

from nsj_queue_lib.client.channel import (
    AuthenticationError,
    ServerConnectionError,
    ServerRequestError,
)
from nsj_queue_lib.client.lock_client import LockClient
from nsj_queue_lib.client.notify_client import NotifyClient

__all__ = [
    "AuthenticationError",
    "LockClient",
    "NotifyClient",
    "ServerConnectionError",
    "ServerRequestError",
]
