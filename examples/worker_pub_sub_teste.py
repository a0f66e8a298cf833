"""A pub/sub worker, in the shape of the original project's ``worker_pub_sub_teste.py``.

One ``WorkerPubSubBase`` subclass serves every subscriber of a queue:

- the subscriber ``teste`` is handled by the method decorated
  ``@Subscriber("teste")`` (and, once its attempts run out, by the one
  decorated ``@DeadSubscriber("teste")``);
- a subscriber with no method here but with a ``url`` is delivered by webhook
  (its ``http_method`` and ``headers``, the publication as the JSON body of
  POST and PUT), exactly as ``python -m nsj_queue_lib.worker_webhook`` would;
- a subscriber with neither fails with a clear message, is retried and ends
  in the dead letter like any task.

Run it with the queue's settings in the environment (QUEUE_SUBSCRIBER_TABLE
is needed to fan publications out)::

    DB_HOST=localhost DB_BASE=app DB_USER=app \\
    QUEUE_NAME=fila_teste QUEUE_TABLE=public.fila_teste \\
    QUEUE_SUBSCRIBER_TABLE=public.fila_teste_subscriber \\
    python examples/worker_pub_sub_teste.py

Subscribe, then publish (the publication commits with your own transaction)::

    INSERT INTO public.fila_teste_subscriber (id, processo)
        VALUES ('teste', 'teste');                              -- this file's method
    INSERT INTO public.fila_teste_subscriber (id, processo, url, http_method, headers)
        VALUES ('teste_webhook', 'teste', 'https://example.com/hook', 'POST',
                '{"Authorization": "Bearer <token>"}');         -- called by webhook

    QueueClient(conn, "public.fila_teste", "public.fila_teste_subscriber").insert_task_pub_sub(
        "erp", "assinantes", "teste", "pedido-1", {"pedido": 1})
    conn.commit()

A publication whose JSON has ``"falhar": true`` makes the ``teste`` method
fail every attempt, to watch the retries and ``@DeadSubscriber`` at work.
It stops cleanly on SIGTERM, SIGINT (Ctrl-C) or ``NOTIFY fila_teste, 'HALT'``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from nsj_queue_lib import DeadSubscriber, Subscriber, WorkerPubSubBase

# A child of the "nsj_queue_lib" logger: it goes wherever the worker's logs go.
logger = logging.getLogger("nsj_queue_lib.examples.worker_pub_sub_teste")


class FalhaSimulada(Exception):
    """The failure a publication asked for with ``"falhar": true``."""


def publication_data(payload: dict[str, Any]) -> Any:
    """The publication as sent by the publisher: decoded JSON, or the text itself."""
    publication = payload["publication"]
    try:
        return json.loads(publication) if publication else None
    except ValueError:
        return publication


class WorkerPubSubTeste(WorkerPubSubBase):
    @Subscriber("teste")
    def execute_subscriber_teste(
        self,
        payload: dict[
            str, Any
        ],  # the whole envelope: {"publication": <text>, "subscription": {...}}
        subscription: dict[str, Any],  # the subscriber's row
        tarefa: dict[
            str, Any
        ],  # this delivery's queue row (publication_id, subscriber_id, tentativa...)
        bd_conn,
    ) -> str:
        # Runs inside a transaction on bd_conn, like WorkerBase.execute: write
        # with bd_conn (never commit); raising rolls it back and retries.
        dados = publication_data(payload)
        if isinstance(dados, dict) and dados.get("falhar"):
            raise FalhaSimulada(f"falha simulada na tentativa {tarefa['tentativa']}")
        agora = bd_conn.execute("SELECT clock_timestamp()").fetchone()[0]
        logger.info(
            "assinante %s, publicação %s (tentativa %s): %s",
            subscription["id"],
            tarefa["publication_id"],
            tarefa["tentativa"],
            dados,
        )
        return f"assinante {subscription['id']}: publicação {tarefa['publication_id']} tratada em {agora:%H:%M:%S}"

    @DeadSubscriber("teste")
    def execute_dead_subscriber_teste(
        self,
        payload: dict[str, Any],
        subscription: dict[str, Any],
        tarefa: dict[str, Any],
        bd_conn,
    ) -> str:
        # The delivery failed QUEUE_MAX_RETRY times: compensate, alert, park it...
        logger.warning(
            "assinante %s desistiu da publicação %s (primeira tentativa: %s)",
            subscription["id"],
            tarefa["publication_id"],
            tarefa["live_id"],
        )
        return f"assinante {subscription['id']}: fila de mortos tratada (publicação {tarefa['publication_id']})"


if __name__ == "__main__":
    WorkerPubSubTeste().run()  # settings from the environment; blocks until stopped
