"""``python -m nsj_queue_lib``: the ``nsjq`` command."""

from __future__ import annotations

from nsj_queue_lib.cli import run

if __name__ == "__main__":
    run()
