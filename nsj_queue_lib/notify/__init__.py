"""How a worker is woken: the payloads every wake-up mechanism carries.

The mechanisms themselves are the database's LISTEN (``db/postgres/listener.py``),
polling (``notify/polling.py``) and the socket server (``notify/server_listener.py``);
a driver picks one.
"""

HALT_PAYLOAD = "HALT"  # every worker of the queue stops
SCHEDULED_PAYLOAD = "scheduled"  # a task due later was inserted: re-plan the next wake-up
