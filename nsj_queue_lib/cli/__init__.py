"""The ``nsjq`` command (also ``python -m nsj_queue_lib``): look at a queue and operate it.

``main(argv)`` parses the arguments, runs one command and returns its exit code:
0 done, 1 not found or nothing to do, 2 bad usage or configuration (one line on
stderr, no traceback); ``run(argv)`` is the command's process (``main``, then its
exit). The database and the queue table come from the worker's environment variables
(DB_*, QUEUE_TABLE) or ``--dsn`` / ``--table``.
"""

from __future__ import annotations

from nsj_queue_lib.cli.app import main, run

__all__ = ["main", "run"]
