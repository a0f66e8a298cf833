"""How a worker is woken: PostgreSQL LISTEN (later: socket server, polling)."""
