"""Statuses and column names of the queue table (the public contract)."""

from __future__ import annotations

PENDENTE = "pendente"
AGENDADA = "agendada"
PROCESSANDO = "processando"
FALHA = "falha"
FALHA_PROCESSANDO = "falha_processando"
SUCESSO = "sucesso"

STATUSES = (PENDENTE, AGENDADA, PROCESSANDO, FALHA, FALHA_PROCESSANDO, SUCESSO)
# Rows in these statuses still have work ahead of them: purge never deletes them.
ACTIVE_STATUSES = (PENDENTE, AGENDADA, PROCESSANDO)

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

# Column sizes of the contract's DDL; checked before insert so the caller
# gets a clear error instead of a driver truncation error.
TEXT_LIMITS = {
    "origem": 150,
    "destino": 150,
    "processo": 250,
    "chave_externa": 100,
    "grupo_empresarial": 40,
}
MENSAGEM_LIMIT = 500
DEFAULT_PRIORITY = 50
