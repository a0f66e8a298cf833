"""``make demo``: create a queue, enqueue a few tasks, run a real worker until they settle.

    python examples/demo.py

The database: ``DB_HOST`` (or ``DATABASE_HOST``) set means "use that server",
with ``DB_PORT``, ``DB_BASE``, ``DB_USER`` and ``DB_PASS`` as the worker reads
them. A fresh queue named ``demo_<random>`` is created there and dropped at the
end (``DEMO_KEEP=1`` keeps it), so an existing database is not disturbed.
Without ``DB_HOST``, a throwaway PostgreSQL is started in a temporary directory
with ``pgserver`` (``pip install 'nsj-queue-lib[embedded]'``) and removed at the end.

The tasks, all enqueued in one transaction before the worker starts:

- ``prioritaria``: prioridade 90, enqueued last, runs first;
- ``normal-1``, ``normal-2``: two plain tasks (``insert_tasks``, one round trip);
- ``falha-2x``: fails on attempts 1 and 2 and succeeds on attempt 3;
- ``agendada-3s``: must not run before 3 seconds from now;
- ``sempre-falha``: fails all QUEUE_MAX_RETRY=3 attempts, then its dead letter
  is handled by ``execute_dead``;
- ``longa``: 50 steps of 0.2 s (prioridade 10: it runs after the others that
  are ready), reporting its progress, which the demo prints as it reads it
  with ``QueueClient.get_task``; after a few steps the demo cancels it
  (``cancel_task``), the handler sees it and the task ends ``cancelada``;
- ``cancelada-antes``: due in a minute, cancelled right after the enqueue: it
  never runs.

The worker is ``examples/worker_simple.py`` run as a separate process, with
short retry delays (QUEUE_BASE_INTERVAL_RETRY=0.02 minutes, so attempt N waits
N x 1.2 s) and maintenance threads every second. Its log lines are shown
prefixed with ``worker |``. When no row is 'pendente', 'agendada' or
'processando' and the dead letter is handled, the worker gets SIGTERM (it must
exit with code 0), the queue's rows are printed, and the outcome is checked.
Exit code 0 when everything happened as described; 1 with a message otherwise
(including a timeout: DEMO_TIMEOUT seconds, default 60).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from nsj_queue_lib import ConfigError, QueueClient, Settings
from nsj_queue_lib.cli import main as nsjq
from nsj_queue_lib.db_gen import render

EXAMPLES = Path(__file__).resolve().parent
sys.path.insert(0, str(EXAMPLES))
# examples/worker_simple.py, the worker this demo runs
import worker_simple  # noqa: E402 - importable once sys.path is set above

SCHEMA = "public"
MAX_RETRY = 3
# The worker's settings for the demo: fast retries and maintenance threads.
WORKER_SETTINGS = {
    "QUEUE_MAX_RETRY": str(MAX_RETRY),
    "QUEUE_BASE_INTERVAL_RETRY": "0.02",  # minutes: attempt N is retried N x 1.2 s later
    "QUEUE_RETRY_THREAD_INTERVAL": "1",
    "QUEUE_NOTIFY_THREAD_INTERVAL": "1",
    "QUEUE_GRACE_PERIOD": "5",
    "QUEUE_CONCURRENCY": "1",  # one task at a time, so the order of execution is visible
}
ACTIVE = ("pendente", "agendada", "processando")
CANCEL_AFTER_STEPS = 5
POLL_SECONDS = 0.2
STOP_TIMEOUT_SECONDS = 20.0
MESSAGE_WIDTH = 90


class DemoFailed(Exception):
    """The demo did not go as described; the message says what happened."""


def log(message: str = "") -> None:
    print(message, flush=True)


def elapsed(start: float) -> str:
    return f"{time.monotonic() - start:.1f} s"


# -- the database --------------------------------------------------------------


def external_database_env() -> dict[str, str] | None:
    """The DB_* variables of the server to use, or None when DB_HOST is unset (embedded)."""
    if not ((os.environ.get("DB_HOST") or os.environ.get("DATABASE_HOST") or "").strip()):
        return None
    # Validate them exactly as the worker will (every bad variable named at once).
    probe = dict(os.environ, QUEUE_NAME="demo", QUEUE_TABLE=f"{SCHEMA}.demo")
    try:
        settings = Settings.from_env(probe)
    except ConfigError as exc:
        raise DemoFailed(
            "DB_HOST is set, so the demo uses that server, but: "
            + "; ".join(f"{name} {why}" for name, why in exc.problems.items())
            + " (unset DB_HOST to use an embedded PostgreSQL)"
        ) from None
    return {
        "DB_HOST": settings.db_host,
        "DB_PORT": str(settings.db_port),
        "DB_BASE": settings.db_name,
        "DB_USER": settings.db_user,
        "DB_PASS": settings.db_pass,
    }


def start_embedded(stack: contextlib.ExitStack) -> dict[str, str]:
    """Start a throwaway PostgreSQL with pgserver; stopped and deleted when ``stack`` closes."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            import pgserver
    except ImportError:
        raise DemoFailed(
            "DB_HOST is unset and pgserver is not installed: pip install -e '.[embedded]' "
            "(make demo does it), or set DB_HOST, DB_BASE, DB_USER (and DB_PORT, DB_PASS)"
        ) from None
    # A short path: PostgreSQL's unix socket is created in it (108-byte limit).
    directory = tempfile.mkdtemp(prefix="nsjq-demo-")
    stack.callback(shutil.rmtree, directory, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(directory, cleanup_mode="stop")
    stack.callback(server.cleanup)
    params = conninfo_to_dict(server.get_uri())
    return {
        "DB_HOST": params["host"],  # the socket directory
        "DB_PORT": str(server.get_postmaster_info().port or 5432),
        "DB_BASE": params.get("dbname") or "postgres",
        "DB_USER": params.get("user") or "postgres",
        "DB_PASS": params.get("password") or "",
    }


def conninfo(db: dict[str, str]) -> str:
    return make_conninfo(
        host=db["DB_HOST"],
        port=db["DB_PORT"],
        dbname=db["DB_BASE"],
        user=db["DB_USER"],
        password=db["DB_PASS"] or None,
        application_name="nsj_queue_lib:demo",
    )


def drop_queue(conn: psycopg.Connection, queue: str, result_table: str) -> None:
    """Remove what the demo created (a failure here is reported, never raised)."""
    try:
        conn.execute("SET lock_timeout = '5s'")
        conn.execute(
            f"DROP TABLE IF EXISTS {SCHEMA}.{queue} CASCADE;"
            f"DROP TABLE IF EXISTS {SCHEMA}.{queue}_subscriber CASCADE;"
            f"DROP FUNCTION IF EXISTS {SCHEMA}.notify_{queue}_insert() CASCADE;"
            f"DROP TABLE IF EXISTS {result_table}"
        )
    except psycopg.Error as exc:
        print(
            f"demo: warning: could not drop the demo queue {SCHEMA}.{queue}: {str(exc).strip()}",
            file=sys.stderr,
            flush=True,
        )


# -- the tasks -----------------------------------------------------------------


def enqueue(conn: psycopg.Connection, queue_table: str) -> dict[str, int]:
    """Enqueue the demo's tasks in one transaction; returns {chave_externa: id}."""
    client = QueueClient(conn, queue_table, f"{queue_table}_subscriber")
    ids: dict[str, int] = {}
    with conn.transaction():
        # The scheduled time comes from the database's clock, the one the claim compares with.
        in_3s = conn.execute("SELECT clock_timestamp() + interval '3 seconds'").fetchone()[0]
        common = dict(origem="demo", destino="worker_simple", processo="demo")
        bulk = client.insert_tasks(
            [
                dict(common, chave_externa="normal-1", payload={"pedido": 1}),
                dict(common, chave_externa="normal-2", payload={"pedido": 2}),
            ]
        )
        ids["normal-1"], ids["normal-2"] = bulk
        ids["falha-2x"] = client.insert_task(
            chave_externa="falha-2x", payload={"falhas": 2}, **common
        )
        ids["agendada-3s"] = client.insert_task(
            chave_externa="agendada-3s", payload={"pedido": 3}, data_hora=in_3s, **common
        )
        ids["sempre-falha"] = client.insert_task(
            chave_externa="sempre-falha", payload={"sempre_falhar": True}, **common
        )
        ids["prioritaria"] = client.insert_task(
            chave_externa="prioritaria", payload={"pedido": 4}, prioridade=90, **common
        )
        ids["longa"] = client.insert_task(
            chave_externa="longa", payload={"passos": 50}, prioridade=10, **common
        )
        ids["cancelada-antes"] = client.insert_task(
            chave_externa="cancelada-antes",
            payload={"pedido": 5},
            data_hora=in_3s + datetime.timedelta(minutes=1),
            **common,
        )
    with conn.transaction():
        status = client.cancel_task(ids["cancelada-antes"])
    log(f"  demo   | cancel_task({ids['cancelada-antes']}) (cancelada-antes) -> {status}")
    return ids


class CancelAfterProgress:
    """Prints the progress of ``longa`` while it runs; cancels it after CANCEL_AFTER_STEPS."""

    def __init__(self, queue_table: str, task_id: int):
        self.queue_table = queue_table
        self.task_id = task_id
        self.last: tuple | None = None
        self.cancelled = False

    def __call__(self, conn: psycopg.Connection) -> None:
        client = QueueClient(conn, self.queue_table)
        task = client.get_task(self.task_id)
        progress = task and task["progress"]
        if not progress or self.cancelled:
            return
        seen = (progress["done"], progress["total"])
        if seen != self.last:
            bar = "#" * (20 * progress["done"] // progress["total"])
            log(f"  demo   | longa: [{bar:<20}] {progress['message']}")
            self.last = seen
        if progress["done"] >= CANCEL_AFTER_STEPS:
            with conn.transaction():
                status = client.cancel_task(self.task_id)
            log(f"  demo   | cancel_task({self.task_id}) (longa) -> {status}")
            self.cancelled = True


# -- the worker process ----------------------------------------------------------


def start_worker(env: dict[str, str]) -> tuple[subprocess.Popen, threading.Thread]:
    worker = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "worker_simple.py")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )

    def relay() -> None:
        for line in worker.stdout:
            print(f"  worker | {line.rstrip()}", flush=True)

    relay_thread = threading.Thread(target=relay, name="worker-log", daemon=True)
    relay_thread.start()
    return worker, relay_thread


def stop_worker(worker: subprocess.Popen, relay_thread: threading.Thread) -> int:
    """SIGTERM, then wait for the worker to exit; returns its exit code."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as exc:
            worker.kill()
            worker.wait()
            relay_thread.join(2)
            raise DemoFailed(
                f"the worker did not stop within {STOP_TIMEOUT_SECONDS:.0f} s of SIGTERM"
            ) from exc
    relay_thread.join(2)
    return worker.returncode


def kill_if_running(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.kill()
        worker.wait()


def status_counts(conn: psycopg.Connection, queue_table: str) -> dict[str, int]:
    rows = conn.execute(f"SELECT status, count(*) FROM {queue_table} GROUP BY status").fetchall()
    return dict(rows)


def dead_letter_handled(conn: psycopg.Connection, queue_table: str) -> bool:
    return bool(
        conn.execute(
            f"SELECT count(*) FROM {queue_table} WHERE dead AND status = 'sucesso'"
        ).fetchone()[0]
    )


def wait_until_settled(
    conn, queue_table: str, worker: subprocess.Popen, timeout: float, watch
) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while True:
        watch(conn)
        counts = status_counts(conn, queue_table)
        summary = ", ".join(f"{status}={counts[status]}" for status in sorted(counts))
        if summary != last:
            log(f"  demo   | rows: {summary}")
            last = summary
        if not any(counts.get(status) for status in ACTIVE) and dead_letter_handled(
            conn, queue_table
        ):
            return
        if worker.poll() is not None:
            raise DemoFailed(
                f"the worker exited with code {worker.returncode} before the tasks were settled"
            )
        if time.monotonic() >= deadline:
            raise DemoFailed(
                f"timeout: the tasks were not settled after {timeout:.0f} s (rows: {summary})"
            )
        time.sleep(POLL_SECONDS)


# -- the report --------------------------------------------------------------------


def fetch_rows(conn, queue_table: str, t0) -> list[dict]:
    cur = conn.execute(
        f"""
        SELECT id, id_inicial, chave_externa, prioridade, tentativa, status, dead, estouro_tentativas,
               extract(epoch FROM data_hora - %s)::float8 AS data_hora_s, mensagem
        FROM {queue_table}
        ORDER BY coalesce(live_id, id_inicial, id), dead, id
        """,
        (t0,),
    )
    names = [c.name for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def print_table(rows: list[dict]) -> None:
    headers = [
        "id",
        "id_inicial",
        "chave_externa",
        "prioridade",
        "tentativa",
        "status",
        "dead",
        "data_hora",
        "mensagem",
    ]
    lines = []
    for row in rows:
        mensagem = (row["mensagem"] or "").replace("\n", " ")
        if len(mensagem) > MESSAGE_WIDTH:
            mensagem = mensagem[: MESSAGE_WIDTH - 3] + "..."
        lines.append(
            [
                str(row["id"]),
                "" if row["id_inicial"] is None else str(row["id_inicial"]),
                row["chave_externa"] or "",
                str(row["prioridade"]),
                str(row["tentativa"]),
                row["status"],
                "yes" if row["dead"] else "",
                f"+{row['data_hora_s']:.1f}s",
                mensagem,
            ]
        )
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    numeric = {0, 1, 3, 4, 7}

    def fmt(cells: list[str]) -> str:
        return " | ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    log(fmt(headers))
    log("-+-".join("-" * w for w in widths))
    for line in lines:
        log(fmt(line))
    log("(data_hora: when the attempt could run, in seconds after the tasks were enqueued)")


def check_outcome(conn, queue_table: str, result_table: str, ids: dict[str, int]) -> list[str]:
    """What the demo promises, checked on the rows; returns the problems (empty: all good)."""
    problems = []
    attempts = {}
    for chave, task_id in ids.items():
        attempts[chave] = conn.execute(
            f"SELECT tentativa, status, estouro_tentativas FROM {queue_table}"
            " WHERE coalesce(id_inicial, id) = %s AND NOT dead ORDER BY tentativa",
            (task_id,),
        ).fetchall()
    expected = {
        "prioritaria": [(1, "sucesso", False)],
        "normal-1": [(1, "sucesso", False)],
        "normal-2": [(1, "sucesso", False)],
        "agendada-3s": [(1, "sucesso", False)],
        "falha-2x": [(1, "falha", False), (2, "falha", False), (3, "sucesso", False)],
        "sempre-falha": [(1, "falha", False), (2, "falha", False), (3, "falha", True)],
        "longa": [(1, "cancelada", False)],
        "cancelada-antes": [(1, "cancelada", False)],
    }
    for chave, want in expected.items():
        got = [(t, s, bool(e)) for t, s, e in attempts[chave]]
        if got != want:
            problems.append(
                f"{chave}: attempts (tentativa, status, estouro) {got}, expected {want}"
            )
    dead = conn.execute(
        f"SELECT status FROM {queue_table} WHERE dead AND live_id = %s", (ids["sempre-falha"],)
    ).fetchall()
    if dead != [("sucesso",)]:
        problems.append(
            f"sempre-falha: dead-letter rows {dead}, expected one handled ('sucesso') row"
        )

    # The handler's own rows: one per successful attempt, none from the failed ones.
    results = conn.execute(
        f"SELECT chave_externa, dead, processado_em FROM {result_table} ORDER BY processado_em, id"
    ).fetchall()
    written = sorted((chave, bool(dead)) for chave, dead, _ in results)
    want_written = sorted(
        [(c, False) for c in expected if c not in ("sempre-falha", "longa", "cancelada-antes")]
        + [("sempre-falha", True)]
    )
    if written != want_written:
        problems.append(
            f"result table: rows {written}, expected {want_written} "
            "(failed attempts must leave nothing: their writes are rolled back)"
        )
    if results and results[0][0] != "prioritaria":
        problems.append(f"the first task executed was {results[0][0]!r}, expected 'prioritaria'")
    scheduled = conn.execute(
        f"SELECT r.processado_em >= q.data_hora FROM {result_table} r JOIN {queue_table} q ON q.id = r.tarefa_id"
        " WHERE r.chave_externa = 'agendada-3s'"
    ).fetchall()
    if scheduled and not scheduled[0][0]:
        problems.append("agendada-3s ran before its data_hora")
    return problems


# -- main ----------------------------------------------------------------------------


def run_demo() -> None:
    start = time.monotonic()
    timeout = float(os.environ.get("DEMO_TIMEOUT") or 60)
    keep = (os.environ.get("DEMO_KEEP") or "").strip().lower() in ("1", "true", "yes", "on")
    with contextlib.ExitStack() as stack:
        db = external_database_env()
        if db is None:
            log(
                "demo: DB_HOST is unset: starting an embedded PostgreSQL (pgserver) in a temporary directory"
            )
            db = start_embedded(stack)
            where = "embedded PostgreSQL"
        else:
            where = f"{db['DB_HOST']}:{db['DB_PORT']}/{db['DB_BASE']} as {db['DB_USER']}"
        log(f"demo: database ready ({where}) after {elapsed(start)}")

        conn = stack.enter_context(
            psycopg.connect(conninfo(db), autocommit=True, connect_timeout=10)
        )
        queue = f"demo_{secrets.token_hex(4)}"
        queue_table = f"{SCHEMA}.{queue}"
        result_table = f"{queue_table}_resultado"
        conn.execute(render(SCHEMA, queue))
        if not keep:
            stack.callback(drop_queue, conn, queue, result_table)
        conn.execute(worker_simple.result_table_ddl(result_table))
        log(
            f"demo: created queue {queue_table} (db_gen) and the worker's result table {result_table}"
        )

        t0 = conn.execute("SELECT clock_timestamp()").fetchone()[0]
        ids = enqueue(conn, queue_table)
        log(
            "demo: enqueued "
            + ", ".join(f"{chave} (id {task_id})" for chave, task_id in ids.items())
        )

        env = {k: v for k, v in os.environ.items() if not k.startswith("DATABASE_")}  # DB_* only
        env.update(
            db,
            **WORKER_SETTINGS,
            DB_DRIVER="POSTGRES",
            QUEUE_NAME=queue,
            QUEUE_TABLE=queue_table,
            QUEUE_SUBSCRIBER_TABLE=f"{queue_table}_subscriber",
            EXAMPLE_RESULT_TABLE=result_table,
            PYTHONUNBUFFERED="1",
        )
        log(
            f"demo: starting the worker: {Path(sys.executable).name} examples/worker_simple.py "
            f"({', '.join(f'{k}={v}' for k, v in WORKER_SETTINGS.items())})"
        )
        worker, relay_thread = start_worker(env)
        stack.callback(kill_if_running, worker)
        settle_start = time.monotonic()
        watch = CancelAfterProgress(queue_table, ids["longa"])
        wait_until_settled(conn, queue_table, worker, timeout, watch)
        settled_after = time.monotonic() - settle_start

        log("demo: every task is settled; sending SIGTERM to the worker")
        code = stop_worker(worker, relay_thread)
        if code != 0:
            raise DemoFailed(f"the worker exited with code {code} after SIGTERM, expected 0")
        log("demo: the worker exited with code 0")

        log()
        log(f"Rows of {queue_table}:")
        log()
        print_table(fetch_rows(conn, queue_table, t0))
        log()
        problems = check_outcome(conn, queue_table, result_table, ids)
        if problems:
            raise DemoFailed("the outcome is not the expected one:\n  - " + "\n  - ".join(problems))
        log(
            "demo: OK: prioritaria ran first; falha-2x succeeded on attempt 3; agendada-3s waited for its time;"
        )
        log(
            f"      sempre-falha failed {MAX_RETRY} times and its dead letter was handled by execute_dead;"
        )
        log(
            "      the failed attempts left no row in the result table (their writes were rolled back);"
        )
        log(
            f"      longa reported its progress and stopped when cancelled after {CANCEL_AFTER_STEPS} "
            "steps; cancelada-antes never ran."
        )
        log(
            f"demo: tasks settled {settled_after:.1f} s after the worker started; total {elapsed(start)}"
            + (f"; queue {queue_table} kept (DEMO_KEEP)" if keep else "")
        )
        show_status(db, queue_table)


def show_status(db: dict[str, str], queue_table: str) -> None:
    """What ``nsjq status`` says of the demo's queue (with the worker's DB_* variables)."""
    log()
    log(f"$ QUEUE_TABLE={queue_table} nsjq status")
    sys.stdout.flush()
    dsn = make_conninfo(
        host=db["DB_HOST"],
        port=db["DB_PORT"],
        dbname=db["DB_BASE"],
        user=db["DB_USER"],
        password=db["DB_PASS"] or None,
    )
    if nsjq(["--dsn", dsn, "--table", queue_table, "status"]) != 0:
        raise DemoFailed("nsjq status failed (its message is above)")


def main() -> int:
    try:
        run_demo()
    except DemoFailed as exc:
        print(f"demo: FAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    except psycopg.Error as exc:
        print(
            f"demo: FAILED: database error: {type(exc).__name__}: {str(exc).strip()}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    except (
        KeyboardInterrupt
    ):  # Ctrl-C: the worker, the queue and the embedded server are cleaned up already
        print("demo: interrupted", file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
