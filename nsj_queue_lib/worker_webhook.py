"""WorkerWebhook: delivers pub/sub publications to the subscribers' URLs.

Needs no code: ``python -m nsj_queue_lib.worker_webhook`` with the usual
environment (QUEUE_SUBSCRIBER_TABLE included). Each subscriber's ``url`` is
called with its ``http_method`` and ``headers``; see ``nsj_queue_lib.webhook``.
"""

from __future__ import annotations

from nsj_queue_lib.worker_pub_sub_base import WorkerPubSubBase


class WorkerWebhook(WorkerPubSubBase):
    """A pub/sub worker with no subscriber methods: every delivery goes by webhook."""


def main() -> None:
    WorkerWebhook().run()


if __name__ == "__main__":
    main()
