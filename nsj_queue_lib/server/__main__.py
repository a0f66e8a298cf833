"""``python -m nsj_queue_lib.server``: run the socket server (``halt`` stops a running one)."""

import sys

from nsj_queue_lib.server.app import main

if __name__ == "__main__":
    sys.exit(main())
