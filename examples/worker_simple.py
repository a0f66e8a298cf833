"""A plain worker: a ``WorkerBase`` subclass with one handler for every task.

Run it with the queue's settings in the environment::

    DB_HOST=localhost DB_BASE=app DB_USER=app \\
    QUEUE_NAME=fila_teste QUEUE_TABLE=public.fila_teste \\
    python examples/worker_simple.py

It stops cleanly on SIGTERM, SIGINT (Ctrl-C) or ``NOTIFY fila_teste, 'HALT'``.

What the handler does, so that the queue's guarantees can be seen in the
database:

- ``execute`` inserts one row into a result table (``<QUEUE_TABLE>_resultado``,
  or ``EXAMPLE_RESULT_TABLE``) on ``bd_conn``, inside the transaction that also
  marks the task ``sucesso``. The table is created at start if missing.
- A JSON payload may ask for failures, to watch retries and the dead letter:
  ``{"falhas": 2}`` fails attempts 1 and 2 and succeeds on attempt 3, and
  ``{"sempre_falhar": true}`` fails every attempt. The attempt number comes from
  the queue row itself (``tarefa["tentativa"]``), so it is right whichever worker
  process runs the attempt. A failing attempt inserts its result row *before*
  raising: the row is rolled back with the rest of the attempt, so the result
  table ends with exactly one row per task that succeeded.
- ``{"passos": 20}`` works in 20 steps of 0.2 s, reporting its progress
  (``current_task().report_progress``) and stopping when it is cancelled
  (``current_task().check_cancelled()`` raises ``TaskCancelled``: the task
  ends 'cancelada' and its result row is rolled back).
- ``execute_dead`` handles a task that used up its ``QUEUE_MAX_RETRY`` attempts:
  it records the dead letter in the same result table (``dead = true``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from nsj_queue_lib import ConfigError, Settings, WorkerBase, current_task
from nsj_queue_lib.db.postgres.conninfo import conninfo
from nsj_queue_lib.identifiers import check_table_name

RESULT_TABLE_VARIABLE = "EXAMPLE_RESULT_TABLE"
STARTUP_DB_WAIT_SECONDS = 30.0
STEP_SECONDS = 0.2  # one step of a {"passos": N} task


class SimulatedFailure(Exception):
    """The failure a payload asked for (``falhas`` or ``sempre_falhar``)."""


def result_table_for(queue_table: str, environ=os.environ) -> str:
    """The result table: ``EXAMPLE_RESULT_TABLE``, else ``<QUEUE_TABLE>_resultado``."""
    name = (environ.get(RESULT_TABLE_VARIABLE) or "").strip() or f"{queue_table}_resultado"
    return check_table_name(name, RESULT_TABLE_VARIABLE)


def result_table_ddl(table: str) -> str:
    return f"""
        CREATE TABLE IF NOT EXISTS {check_table_name(table, "result table")} (
            id            bigserial PRIMARY KEY,
            tarefa_id     bigint      NOT NULL,  -- the attempt that wrote the row
            id_inicial    bigint,                -- the task's first attempt
            live_id       bigint,                -- dead letter: first attempt of the task that died
            tentativa     integer,
            processo      varchar(250),
            chave_externa varchar(100),
            dead          boolean     NOT NULL DEFAULT false,
            mensagem      text,
            processado_em timestamptz NOT NULL DEFAULT clock_timestamp()
        )
    """


def ensure_result_table(
    conninfo: str, table: str, wait_seconds: float = STARTUP_DB_WAIT_SECONDS
) -> None:
    """Create the result table if it is missing, waiting a little for the database to come up."""
    import psycopg

    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
                try:
                    conn.execute(result_table_ddl(table))
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                    pass  # another worker created it at the same moment
                return
        except psycopg.OperationalError as exc:
            if time.monotonic() >= deadline:
                raise
            print(
                f"worker_simple: database not reachable yet ({str(exc).strip()}); retrying",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(1.0)


def parse_payload(payload: str | None) -> dict[str, Any]:
    """The payload as a dict: JSON objects as they are, anything else under ``"texto"``."""
    if payload is None:
        return {}
    try:
        data = json.loads(payload)
    except ValueError:
        return {"texto": payload}
    return data if isinstance(data, dict) else {"dados": data}


class WorkerSimple(WorkerBase):
    def __init__(self, settings: Settings | None = None, result_table: str | None = None) -> None:
        super().__init__(settings)
        self.result_table = result_table or result_table_for(
            settings.queue_table if settings else "fila_teste"
        )

    def _record(self, bd_conn, tarefa: dict[str, Any], dead: bool, mensagem: str) -> int:
        row = bd_conn.execute(
            f"INSERT INTO {self.result_table}"
            " (tarefa_id, id_inicial, live_id, tentativa, processo, chave_externa, dead, mensagem)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (
                tarefa["id"],
                tarefa.get("id_inicial") or tarefa["id"],
                tarefa.get("live_id"),
                tarefa.get("tentativa"),
                tarefa.get("processo"),
                tarefa.get("chave_externa"),
                dead,
                mensagem,
            ),
        ).fetchone()
        return row[0]

    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn) -> str:
        # Runs inside a transaction on bd_conn: everything written here commits
        # together with the task's 'sucesso', or is rolled back if this raises.
        dados = parse_payload(payload)
        tentativa = tarefa.get("tentativa") or 1
        mensagem = f"done on attempt {tentativa}"
        result_id = self._record(bd_conn, tarefa, dead=False, mensagem=mensagem)

        # A failure asked for by the payload: raised after the insert above, so
        # the rollback of that insert can be seen (the result table never has it).
        if dados.get("sempre_falhar"):
            raise SimulatedFailure("simulated failure (sempre_falhar)")
        falhas = int(dados.get("falhas") or 0)
        if tentativa <= falhas:
            raise SimulatedFailure(f"simulated failure {tentativa} of {falhas}")
        passos = int(dados.get("passos") or 0)
        task = current_task()
        for passo in range(1, passos + 1):
            task.check_cancelled()  # raises TaskCancelled once the task is cancelled
            time.sleep(STEP_SECONDS)
            task.report_progress(passo, passos, f"step {passo} of {passos}")
        return f"{mensagem}; result #{result_id} written in the same transaction"

    def execute_dead(self, payload: str, tarefa: dict[str, Any], bd_conn) -> str:
        # The task failed QUEUE_MAX_RETRY times. Compensate, alert or park it
        # here; this example records it next to the successful results.
        mensagem = f"dead letter: task {tarefa.get('live_id')} ran out of attempts"
        result_id = self._record(bd_conn, tarefa, dead=True, mensagem=mensagem)
        return f"{mensagem}; recorded as result #{result_id}"


def main(worker_class: type[WorkerSimple] = WorkerSimple) -> None:
    try:
        settings = Settings.from_env(os.environ)
    except ConfigError:
        # WorkerBase.run() reports every bad variable by name and exits non-zero.
        worker_class(result_table="fila_teste_resultado").run()
        return
    try:
        result_table = result_table_for(settings.queue_table)
    except ValueError as exc:
        print(f"worker_simple: configuration error: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        ensure_result_table(conninfo(settings), result_table)
    except Exception as exc:  # report it in one line, not a traceback
        print(
            f"worker_simple: could not create {result_table}: {str(exc).strip()}", file=sys.stderr
        )
        sys.exit(1)
    worker_class(settings, result_table).run()  # blocks until stopped; exits the process


if __name__ == "__main__":
    main()
