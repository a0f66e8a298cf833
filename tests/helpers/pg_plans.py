"""The plans PostgreSQL chooses for a queue's claims.

Two claims exist: the claim function ``claim_next_<table>`` (every worker with
its liveness locks in the database), whose inner query EXPLAIN cannot reach,
so ``auto_explain`` logs it to the session (LOG messages sent as notices);
and the claim without database locks of client/server mode (the store's
``claim_uncommitted`` query after its ``claim_settings``), explained
directly. Each plan is PostgreSQL's JSON plan (the ``Plan`` node).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from tests.helpers.databases import ci_enabled

CLAIM_PATHS = ("claim function", "claim without locks")


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


# The start of the skip reason (tests/summary.py counts the skips by it).
AUTO_EXPLAIN_MISSING = "auto_explain is not available on this PostgreSQL"


def load_auto_explain(conn: Any) -> None:
    """``LOAD 'auto_explain'`` in ``conn``'s session, or skip the test: the embedded
    PostgreSQL (pgserver) ships no contrib modules. Under ``CI=true`` it fails instead."""
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        reason = (
            f"{AUTO_EXPLAIN_MISSING} ({str(exc).strip()}); the embedded PostgreSQL (pgserver) "
            "has no contrib modules: set TEST_PG_DSN to a server that has them"
        )
        if ci_enabled():
            pytest.fail(f"{reason} (CI=true: a missing capability fails the run)", pytrace=False)
        pytest.skip(reason)


def _claim_function_plan(conn: psycopg.Connection, store: PostgresQueueStore) -> dict[str, Any]:
    messages: list[str] = []
    conn.add_notice_handler(lambda diag: messages.append(diag.message_primary or ""))
    load_auto_explain(conn)
    conn.execute("BEGIN")
    try:
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_format = json",
            "client_min_messages = log",
        ):
            conn.execute(f"SET LOCAL {setting}")
        assert store.claim_function is not None
        # A ready task to claim: on a queue with none, the look-up ends before any claim.
        [(task_id,)] = conn.execute(
            f"INSERT INTO {store.queue_table} (origem, destino, processo, chave_externa, payload)"
            " VALUES ('plan', 'plan', 'plan', 'plan', '{}') RETURNING id"
        ).fetchall()
        conn.execute(
            f"SELECT * FROM {store.claim_function}(NULL::bigint, NULL::text, 0, 0, 1, NULL, NULL, NULL)"
        ).fetchall()
    finally:
        conn.execute("ROLLBACK")
    # The claim's liveness lock is the session's (it outlives the rollback).
    conn.execute("SELECT pg_advisory_unlock(0, (%s::bigint %% 2147483648)::int4)", (task_id,))
    plans = []
    for message in messages:
        if "plan:" not in message:
            continue
        document = json.loads(message.split("plan:", 1)[1])
        if "FOR UPDATE SKIP LOCKED" in document.get("Query Text", ""):
            plans.append(document["Plan"])
    assert len(plans) == 1, messages
    return plans[0]


def _claim_uncommitted_plan(conn: psycopg.Connection, store: PostgresQueueStore) -> dict[str, Any]:
    conn.execute("BEGIN")
    try:
        conn.execute(store.sql["claim_settings"])
        plan = conn.execute(
            "EXPLAIN (FORMAT JSON) " + store.sql["claim_uncommitted"],
            {"handled_subscribers": None, "handled_processos": None, "worker": None},
        ).fetchone()[0]
    finally:
        conn.execute("ROLLBACK")
    if isinstance(plan, str):
        plan = json.loads(plan)
    return plan[0]["Plan"]


def claim_plan(conn: psycopg.Connection, table: str, path: str) -> dict[str, Any]:
    """The plan of the claim ``path`` (one of CLAIM_PATHS) on ``table``; ``conn`` is autocommit
    and its claims are rolled back."""
    store = PostgresQueueStore(table)
    if path == "claim function":
        return _claim_function_plan(conn, store)
    return _claim_uncommitted_plan(conn, store)
