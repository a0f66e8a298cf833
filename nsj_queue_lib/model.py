"""Statuses and column names of the queue table (the public contract)."""

from __future__ import annotations

import dataclasses
from typing import Any

PENDENTE = "pendente"
AGENDADA = "agendada"
PROCESSANDO = "processando"
FALHA = "falha"
FALHA_PROCESSANDO = "falha_processando"
SUCESSO = "sucesso"
# Terminal: cancelled before it ran, or its handler stopped on a cancel request.
CANCELADA = "cancelada"
# Waits for its parents (insert_task(..., after=[...]), nsj_queue_lib/workflow/).
AGUARDANDO = "aguardando"

STATUSES = (
    PENDENTE,
    AGENDADA,
    PROCESSANDO,
    FALHA,
    FALHA_PROCESSANDO,
    SUCESSO,
    CANCELADA,
    AGUARDANDO,
)
# Rows in these statuses still have work ahead of them: purge never deletes them.
ACTIVE_STATUSES = (PENDENTE, AGENDADA, PROCESSANDO, AGUARDANDO)

QUEUE_COLUMNS = (
    "id",
    "id_inicial",
    "data_hora_inicial",
    "data_hora",
    "origem",
    "destino",
    "processo",
    "chave_externa",
    "proxima_tentativa",
    "tentativa",
    "status",
    "reenfileirado",
    "estouro_tentativas",
    "mensagem",
    "id_anterior",
    "data_hora_anterior",
    "status_anterior",
    "mensagem_anterior",
    "payload",
    "tenant",
    "grupo_empresarial",
    "payload_hash",
    "pub_sub",
    "publication_id",
    "subscriber_id",
    "dead",
    "live_id",
    "prioridade",
)

# Columns of a task's life cycle (docs/lifecycle.md), kept out of QUEUE_COLUMNS: the
# claim routines return QUEUE_COLUMNS, and 1.2.2's statements never name these.
LIFECYCLE_COLUMNS = ("cancel_requested", "progress_done", "progress_total", "progress_message")
# Columns of the enqueue options of flow control (docs/flow-control.md), nullable for
# the same reason.
FLOW_COLUMNS = ("dedupe_key", "lock_key")
# An attempt's timeline (docs/reference/queue-table.md): when it was claimed, when it
# ended, by the database's clock, and the name of the worker that claimed it. NULL on
# the rows of 1.2.2's workers, which never name them.
ATTEMPT_COLUMNS = ("started_at", "finished_at", "worker")
# The W3C trace context (traceparent, and tracestate) of the code that enqueued the task
# (docs/integrations/opentelemetry.md); NULL without an active OpenTelemetry span. Kept out
# of QUEUE_COLUMNS, which clients read on tables db_gen --upgrade has not reached yet; the
# claims return it (CLAIMED_COLUMNS), so a worker reads it without a query of its own.
TRACE_COLUMNS = ("trace_context",)
# A task's own overrides of its processo's options, given at enqueue (fleet control,
# docs/fleet-control.md): attempts, the attempt's timeout, the retries' prioridade. NULL:
# the @Task option, else the queue's default. Carried by retries; the claims return them.
OVERRIDE_COLUMNS = ("max_retry", "timeout_s", "next_try_priority")
# A task's fair key (fair shares, docs/fleet-control.md): among ready tasks of one
# prioridade, claims rotate across fair keys. The enqueue stamps a keyed task's data_hora
# with its turn (fleet/fair.py), so the claims, which never read this column, keep their
# order and their cost. NULL: no fair key (claim order as before). Carried by retries.
FAIR_COLUMNS = ("fair_key",)
# Every column besides QUEUE_COLUMNS that a worker needs (checked at start).
EXTRA_COLUMNS = (
    *LIFECYCLE_COLUMNS,
    *FLOW_COLUMNS,
    *ATTEMPT_COLUMNS,
    *TRACE_COLUMNS,
    *OVERRIDE_COLUMNS,
    *FAIR_COLUMNS,
)
# A claimed task's row, as the claims return it and a handler receives it (``tarefa``).
CLAIMED_COLUMNS = (*QUEUE_COLUMNS, *TRACE_COLUMNS, *OVERRIDE_COLUMNS, "lock_key")

SUBSCRIBER_COLUMNS = (
    "id",
    "tenant",
    "grupo_empresarial",
    "processo",
    "url",
    "http_method",
    "headers",
    "ativo",
    "created_at",
)
# The subscriber table's columns of its circuit breaker (fleet/subscriber_breakers.py): not
# part of a delivery's envelope (which carries SUBSCRIBER_COLUMNS).
SUBSCRIBER_BREAKER_COLUMNS = (
    "circuit_breaker_failures",
    "circuit_breaker_cool_down_s",
    "breaker_failures",
    "breaker_open",
    "breaker_until",
    "breaker_trial",
    "breaker_trial_at",
    "breaker_trial_task",
)

# Column sizes of the contract's DDL; checked before insert so the caller
# gets a clear error instead of a driver truncation error.
TEXT_LIMITS = {
    "origem": 150,
    "destino": 150,
    "processo": 250,
    "chave_externa": 100,
    "grupo_empresarial": 40,
    "dedupe_key": 200,
    "lock_key": 200,
}
# The trace_context column's size: a traceparent (55 characters), then ";" and a tracestate
# cut to what fits (observability/trace_context.py).
TRACE_CONTEXT_LIMIT = 512
MENSAGEM_LIMIT = 500
# The mensagem of an attempt cancelled while it ran, and of one cancelled before it ran.
CANCELLED_WHILE_RUNNING = "cancelled while running (QueueClient.cancel_task)"
CANCELLED_BEFORE_IT_RAN = "cancelled before it ran (QueueClient.cancel_task)"
DEFAULT_PRIORITY = 50


@dataclasses.dataclass(frozen=True, slots=True)
class TaskRecord:
    """One attempt as the library handles it.

    The fields are what the runtime decides with, read when the row was
    fetched; ``row`` holds every column and is what a handler receives as
    ``tarefa`` (a handler that changes it changes nothing the library reads).
    """

    id: int
    tentativa: int
    dead: bool
    payload: str | None
    row: dict[str, Any]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TaskRecord:
        return cls(int(row["id"]), row["tentativa"] or 1, bool(row["dead"]), row["payload"], row)

    @property
    def first_id(self) -> int:
        """The id of the task's first attempt (its own id on the first attempt): the id its
        children's edges and its checkpoints name."""
        return int(self.row.get("id_inicial") or self.id)


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """A claimed task, and whether the claim took its liveness lock.

    ``liveness_locked`` is False only when another session held the task's
    lock already (a worker of another library version running it): the
    task then runs without a lock of its own, which the executor logs.
    """

    task: TaskRecord
    liveness_locked: bool
