"""``python -m nsj_queue_lib``: the ``nsjq`` command."""

from __future__ import annotations

import sys

from nsj_queue_lib.cli import main

if __name__ == "__main__":
    sys.exit(main())
