"""The examples in ``examples/`` run as written, and ``make demo`` (examples/demo.py) succeeds.

Every script runs as a real subprocess, with its configuration in the
environment exactly as a user would give it, against the test database
(``pg_dsn``: TEST_PG_DSN or the embedded server).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.databases import table_exists
from tests.helpers.processes import (
    OWN_PREFIXES,
    clean_env,
    db_env,
    run_python,
    script_process,
    stop_script,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.py"))
DEMO_TIMEOUT = 120


def run_example(
    name: str, env: dict[str, str], timeout: float = 60, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    return run_python(str(EXAMPLES / name), *args, env=env, timeout=timeout)


# -- every example compiles and imports without side effects ---------------------


def test_the_examples_exist():
    names = {path.name for path in EXAMPLE_FILES}
    assert {"demo.py", "enqueue.py", "worker_simple.py", "worker_fila_teste.py"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_compiles_and_imports(path, monkeypatch):
    compile(path.read_text(encoding="utf-8"), str(path), "exec")  # a SyntaxError fails here
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for key in list(os.environ):
        if key.startswith(OWN_PREFIXES):
            monkeypatch.delenv(key)
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # importing runs nothing: every script is guarded by __main__
    assert module.__doc__, f"{path.name} explains itself in a docstring"


def test_example_workers_are_worker_base_subclasses(monkeypatch):
    from nsj_queue_lib import WorkerBase

    monkeypatch.syspath_prepend(str(EXAMPLES))
    for stem, cls in (("worker_simple", "WorkerSimple"), ("worker_fila_teste", "WorkerFilaTeste")):
        spec = importlib.util.spec_from_file_location(f"example_{stem}", EXAMPLES / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert issubclass(getattr(module, cls), WorkerBase)


# -- configuration errors are reported, not tracebacks ------------------------------


def test_worker_simple_without_configuration_names_the_variables():
    result = run_example("worker_simple.py", clean_env(), timeout=30)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    for name in ("DB_HOST", "QUEUE_NAME", "QUEUE_TABLE"):
        assert name in last, result.stderr
    assert "Traceback" not in result.stderr


def test_the_pipeline_example_runs_on_the_in_memory_queue():
    result = run_example("worker_pipeline.py", clean_env(), timeout=30, args=("--in-memory",))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "load_customers sucesso 3 batches loaded",  # the generator's return value
        "refresh_report sucesso report: load done",  # the async generator's last message
    ]


def test_demo_with_an_incomplete_db_env_says_what_is_missing():
    result = run_example("demo.py", clean_env(DB_HOST="127.0.0.1"), timeout=30)
    assert result.returncode == 1
    assert "FAILED" in result.stderr and "DB_BASE" in result.stderr and "DB_USER" in result.stderr
    assert "Traceback" not in result.stderr


# -- the demo, end to end ------------------------------------------------------------


@pytest.mark.slow
def test_demo_runs_end_to_end(pg_dsn, pg_admin):
    started = time.monotonic()
    result = run_example("demo.py", clean_env(**db_env(pg_dsn)), timeout=DEMO_TIMEOUT)
    took = time.monotonic() - started
    out = result.stdout
    assert result.returncode == 0, f"stdout:\n{out}\nstderr:\n{result.stderr}"
    assert took < 60, f"the demo took {took:.1f} s"
    assert "demo: the worker exited with code 0" in out
    assert "demo: OK" in out
    # It ends with what `nsjq status` says of the queue: nothing left to run.
    status = out[out.index("nsjq status") :].splitlines()
    assert status[2] == "wake-ups: listen", status
    assert status[3].startswith("workers: "), status  # the demo's worker has stopped
    assert status[5].split()[:2] == ["PROCESSO", "PENDENTE"], status
    assert status[-1] == "running: 0"

    header = next(line for line in out.splitlines() if line.startswith("id |"))
    for column in ("id", "tentativa", "status", "dead", "mensagem", "prioridade", "data_hora"):
        assert re.search(rf"\b{column}\b", header), header
    rows = [line for line in out.splitlines() if re.match(r"^\s*\d+ \|", line)]
    cells = [[c.strip() for c in line.split("|")] for line in rows]
    by_key: dict[str, list[list[str]]] = {}
    for row in cells:
        by_key.setdefault(row[2], []).append(row)
    # id | id_inicial | chave_externa | prioridade | tentativa | status | dead | data_hora | mensagem
    assert [(r[4], r[5]) for r in by_key["falha-2x"]] == [
        ("1", "falha"),
        ("2", "falha"),
        ("3", "sucesso"),
    ]
    assert [(r[4], r[5], r[6]) for r in by_key["sempre-falha"]] == [
        ("1", "falha", ""),
        ("2", "falha", ""),
        ("3", "falha", ""),
        ("1", "sucesso", "yes"),
    ]
    assert "maximum of 3 attempts" in by_key["sempre-falha"][2][8]
    assert by_key["prioritaria"][0][3] == "90"
    assert by_key["agendada-3s"][0][7].startswith("+3.")
    for row in cells:
        assert row[5] not in ("pendente", "agendada", "processando"), row
    # Progress lines while longa ran, then its cancel; cancelada-antes never ran.
    assert re.search(r"longa: \[#* *\] step \d+ of 50", out), out
    assert "(longa) -> processando" in out and "(cancelada-antes) -> cancelada" in out
    assert [r[5] for r in by_key["longa"]] == ["cancelada"]
    assert [r[5] for r in by_key["cancelada-antes"]] == ["cancelada"]

    # The demo removes the queue it created from a shared database.
    queue = re.search(r"created queue (\S+) ", out).group(1)
    assert not table_exists(pg_admin, queue)
    assert not table_exists(pg_admin, f"{queue}_resultado")


# -- enqueue.py and the workers on a real queue --------------------------------------


@pytest.mark.slow
def test_enqueue_example_runs_as_written(pg_dsn, pg_queue, pg_autocommit):
    order_table_existed = table_exists(pg_autocommit, "public.exemplo_pedido")
    try:
        result = run_example("enqueue.py", clean_env(**db_env(pg_dsn), QUEUE_TABLE=pg_queue.table))
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert [line.split(".")[0] for line in lines] == ["1", "2", "3", "4", "5", "6"], (
            result.stdout
        )

        rows = pg_autocommit.execute(
            f"SELECT processo, chave_externa, prioridade, data_hora > clock_timestamp(), payload"
            f" FROM {pg_queue.table} ORDER BY id"
        ).fetchall()
        by_process: dict[str, list] = {}
        for row in rows:
            by_process.setdefault(row[0], []).append(row)
        assert [r[1] for r in by_process["faturar_pedido"]] == ["1001"]  # 1002 was rolled back
        assert by_process["faturar_pedido"][0][4] == '{"itens":3,"pedido":"1001"}'
        assert [r[2] for r in by_process["cancelar_pedido"]] == [90]
        assert [r[3] for r in by_process["lembrar_cliente"]] == [True]
        assert len(by_process["emitir_nota"]) == 100
        assert len(by_process["recalcular_frete"]) == 1  # the second enqueue_once found it
        assert "enqueued=True" in lines[5] and "enqueued=False" in lines[5]
        lost_id = int(re.search(r"task (\d+) was rolled back", lines[1]).group(1))
        assert (
            pg_autocommit.execute(
                f"SELECT count(*) FROM {pg_queue.table} WHERE id = %s", (lost_id,)
            ).fetchone()[0]
            == 0
        )
    finally:
        if not order_table_existed:
            pg_autocommit.execute("DROP TABLE IF EXISTS public.exemplo_pedido")


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["worker_simple.py", "worker_fila_teste.py"])
def test_example_worker_processes_a_task_and_stops_on_sigterm(
    script, pg_dsn, pg_queue, pg_autocommit
):
    from nsj_queue_lib import QueueClient

    result_table = f"{pg_queue.table}_resultado"
    env = clean_env(
        **db_env(pg_dsn),
        QUEUE_NAME=pg_queue.name,
        QUEUE_TABLE=pg_queue.table,
        EXAMPLE_RESULT_TABLE=result_table,
    )
    try:
        with script_process(EXAMPLES / script, env) as worker:
            task_id = QueueClient(pg_autocommit, pg_queue.table).insert_task(
                "teste", "exemplo", "exemplo", "chave-1", {"pedido": 1}
            )

            def settled() -> bool:
                status = pg_autocommit.execute(
                    f"SELECT status FROM {pg_queue.table} WHERE id = %s", (task_id,)
                ).fetchone()[0]
                assert worker.poll() is None, f"the worker exited early:\n{worker.stdout.read()}"
                return status == "sucesso"

            _wait_for(settled, 30, f"task {task_id} to succeed")
            if script == "worker_simple.py":
                written = pg_autocommit.execute(
                    f"SELECT tarefa_id, dead FROM {result_table}"
                ).fetchall()
                assert written == [(task_id, False)]
            stop_script(worker)
    finally:
        pg_autocommit.execute(f"DROP TABLE IF EXISTS {result_table}")


@pytest.mark.slow
def test_worker_simple_failures_roll_back_and_reach_the_dead_letter(
    pg_dsn, pg_queue, pg_autocommit
):
    from nsj_queue_lib import QueueClient

    result_table = f"{pg_queue.table}_resultado"
    env = clean_env(
        **db_env(pg_dsn),
        QUEUE_NAME=pg_queue.name,
        QUEUE_TABLE=pg_queue.table,
        EXAMPLE_RESULT_TABLE=result_table,
        QUEUE_MAX_RETRY="2",
        QUEUE_BASE_INTERVAL_RETRY="0.01",
        QUEUE_NOTIFY_THREAD_INTERVAL="0.5",
        QUEUE_RETRY_THREAD_INTERVAL="1",
    )
    try:
        with script_process(EXAMPLES / "worker_simple.py", env) as worker:
            client = QueueClient(pg_autocommit, pg_queue.table)
            once = client.insert_task("teste", "exemplo", "exemplo", "falha-1x", {"falhas": 1})
            never = client.insert_task(
                "teste", "exemplo", "exemplo", "sempre", {"sempre_falhar": True}
            )

            def done() -> bool:
                assert worker.poll() is None, f"the worker exited early:\n{worker.stdout.read()}"
                active, dead_ok = pg_autocommit.execute(
                    f"SELECT count(*) FILTER (WHERE status IN ('pendente', 'agendada', 'processando')),"
                    f" count(*) FILTER (WHERE dead AND status = 'sucesso') FROM {pg_queue.table}"
                ).fetchone()
                return active == 0 and dead_ok == 1

            _wait_for(done, 45, "the tasks to settle")
            attempts = pg_autocommit.execute(
                f"SELECT coalesce(id_inicial, id), tentativa, status, dead FROM {pg_queue.table} ORDER BY id"
            ).fetchall()
            assert [(t, s) for i, t, s, d in attempts if i == once] == [
                (1, "falha"),
                (2, "sucesso"),
            ]
            assert [(t, s) for i, t, s, d in attempts if i == never and not d] == [
                (1, "falha"),
                (2, "falha"),
            ]
            # Only the successful attempt and the dead letter left a row: failed attempts were rolled back.
            written = pg_autocommit.execute(
                f"SELECT chave_externa, tentativa, dead, live_id FROM {result_table} ORDER BY id"
            ).fetchall()
            assert sorted(written, key=str) == sorted(
                [("falha-1x", 2, False, None), ("sempre", 1, True, never)], key=str
            )
            stop_script(worker)
    finally:
        pg_autocommit.execute(f"DROP TABLE IF EXISTS {result_table}")


# -- the README's quick start, as written ----------------------------------------------


@pytest.mark.slow
def test_quickstart_enqueues_runs_and_shows_in_nsjq_status(pg_dsn, pg_queue, pg_autocommit):
    # The steps of the README's quick start (tests/unit/test_readme.py checks
    # that the README shows this file and these commands).
    env = clean_env(**db_env(pg_dsn), QUEUE_NAME=pg_queue.name, QUEUE_TABLE=pg_queue.table)
    enqueued = run_example("quickstart.py", env, timeout=30, args=("enqueue",))
    assert enqueued.returncode == 0, enqueued.stderr
    task_id = int(re.fullmatch(r"enqueued task (\d+)", enqueued.stdout.strip()).group(1))

    with script_process(EXAMPLES / "quickstart.py", env) as worker:

        def settled() -> bool:
            assert worker.poll() is None, f"the worker exited early:\n{worker.stdout.read()}"
            row = pg_autocommit.execute(
                f"SELECT status, mensagem FROM {pg_queue.table} WHERE id = %s", (task_id,)
            ).fetchone()
            return row == ("sucesso", "hello, world")

        _wait_for(settled, 30, f"task {task_id} to succeed")
        stop_script(worker)
        assert "worker starting" in worker.stdout.read()

    status = run_python("-m", "nsj_queue_lib", "status", env=env, timeout=30)
    assert status.returncode == 0, status.stderr
    greet = next(line.split() for line in status.stdout.splitlines() if line.startswith("greet"))
    assert greet[:7] == ["greet", "0", "0", "0", "0", "0", "1"], status.stdout
