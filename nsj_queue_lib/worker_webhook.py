"""WorkerWebhook: delivers pub/sub publications to the subscribers' URLs.

Needs no code: ``python -m nsj_queue_lib.worker_webhook`` with the usual
environment (QUEUE_SUBSCRIBER_TABLE included). Each subscriber's ``url`` is
called with its ``http_method`` and ``headers``; see ``nsj_queue_lib.webhook``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from nsj_queue_lib.worker_pub_sub_base import WorkerPubSubBase

USAGE_EPILOG = """\
Configured by environment variables (see docs/reference/environment.md):
  DB_HOST, DB_BASE, DB_USER, DB_PASS, DB_PORT, DB_DRIVER   the database
  QUEUE_NAME, QUEUE_TABLE, QUEUE_SUBSCRIBER_TABLE          the pub/sub queue
  DEFAULT_WEBHOOK_TIMEOUT                                  seconds per call (20)
  LOG_DEBUG, LOG_FORMAT (text or json)                     logging
Runs until SIGTERM/SIGINT. Exit codes: 0 stopped, 2 configuration refused
(settings, login, database, queue table or claim routine), 3 a thread died.
"""


class WorkerWebhook(WorkerPubSubBase):
    """A pub/sub worker with no subscriber methods: every delivery goes by webhook."""


def main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(
        prog="python -m nsj_queue_lib.worker_webhook",
        description="Deliver a pub/sub queue's publications to its subscribers' URLs "
        "(each subscriber's url, http_method and headers).",
        epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).parse_args(argv)
    WorkerWebhook().run()


if __name__ == "__main__":
    main()
