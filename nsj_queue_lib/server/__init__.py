"""The optional socket server: locks and wake-ups for workers (client/server mode).

``python -m nsj_queue_lib.server`` runs it (see ``app.main``). Modules:

- ``config``: ``ServerConfig`` from the settings (bind address, ports, token).
- ``locks``: the lock table (named locks owned by connections).
- ``loop``: ``QueueServer``, one selectors event loop for every connection.
- ``check_tasks``: the thread that polls the queue table and relays NOTIFY.
- ``task_source``: the database access of that thread, one class per driver.

The wire format is ``nsj_queue_lib.protocol``. This package never imports
``nsj_queue_lib.runtime``.
"""
