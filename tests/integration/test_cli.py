"""The ``nsjq`` command against real queues on PostgreSQL and MariaDB.

Most cases call ``main(argv)`` in-process (fast); a few run ``python -m
nsj_queue_lib`` to check the real entry point, its exit codes and --version.
The tasks are put in their statuses through the driver's own store (claim,
complete, fail, retry, dead letter), as a worker does; the retried task is
then finished by a real in-process worker.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import subprocess
import sys
from typing import Any

import pytest

from nsj_queue_lib.cli import main
from nsj_queue_lib.cli.config import load
from nsj_queue_lib.db.driver import close_quietly, make_driver
from nsj_queue_lib.queue_client import QueueClient
from tests.helpers.processes import QUIET_SETTINGS, ROOT, InProcessWorker, function_worker, wait_for

# Variables of the developer's shell must not leak into the command under test.
_ISOLATED = ("DB_", "DATABASE_", "QUEUE_")


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith(_ISOLATED):
            monkeypatch.delenv(name)


@dataclasses.dataclass
class Queue:
    dsn: str
    table: str
    namespace: str
    name: str

    def args(self, *argv: str) -> list[str]:
        return ["--dsn", self.dsn, "--table", self.table, *argv]


@pytest.fixture(params=["postgres", "mysql"])
def queue(request) -> Queue:
    if request.param == "postgres":
        q = request.getfixturevalue("pg_queue")
        return Queue(request.getfixturevalue("pg_dsn"), q.table, q.schema, q.name)
    q = request.getfixturevalue("mysql_queue")
    return Queue(request.getfixturevalue("mysql_dsn"), q.table, q.database, q.name)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# -- a queue with tasks in every status ---------------------------------------------------


class Tasks(dict):
    """Names -> ids of the tasks ``populate`` made."""


def _driver(queue: Queue):
    return make_driver(load({}, dsn=queue.dsn, table=queue.table).database_settings())


def populate(queue: Queue) -> Tasks:
    """ok: sucesso; running: processando; broken: failed twice (falha, then exhausted)
    and dead-lettered (``dead``, pendente); ready: pendente, 5 s old; later: due in an hour."""
    driver = _driver(queue)
    store = driver.store()
    store.set_worker_name("cli-test-worker")
    conn = driver.connect(autocommit=True)
    client = QueueClient(conn, queue.table)
    now = datetime.datetime.now(datetime.timezone.utc)

    def insert(name: str, processo: str, **extra: Any) -> int:
        return client.insert_task("cli", "worker", processo, f"chave-{name}", {"n": name}, **extra)

    def claim() -> Any:
        task = store.claim_uncommitted(conn)
        assert task is not None
        return task

    tasks = Tasks()
    try:
        tasks["ok"] = insert("ok", "p1")
        task = claim()
        assert store.complete_if_running(conn, task.id, "done")
        store.commit(conn)

        tasks["running"] = insert("running", "p2")
        claim()
        store.commit(conn)

        tasks["broken"] = insert("broken", "p1")
        task = claim()
        tasks["broken_2"] = store.fail_and_retry(conn, task.id, "falha", "first error", 0.0)
        store.commit(conn)
        store.begin(conn)
        assert store.promote_due(conn, 10) == 1
        store.commit(conn)
        task = claim()
        assert task.id == tasks["broken_2"]
        tasks["dead"] = store.fail_and_bury(conn, task.id, "falha", "second error", task.payload)
        store.commit(conn)

        tasks["ready"] = insert("ready", "p2", data_hora=now - datetime.timedelta(seconds=5))
        tasks["later"] = insert("later", "p2", data_hora=now + datetime.timedelta(hours=1))
    finally:
        close_quietly(conn)
    return tasks


# -- status -------------------------------------------------------------------------------


def columns_of(table_text: str) -> list[int]:
    """Where each column of a table's header line starts."""
    header = table_text.splitlines()[0]
    return [m.start() for m in re.finditer(r"\S+", header)]


def test_status_counts_per_processo_and_status(queue, capsys):
    populate(queue)
    doc = run_json(capsys, *queue.args("status"))
    assert doc["queue"] == queue.table
    by = {p["processo"]: p for p in doc["processos"]}
    assert set(by) == {"p1", "p2"}
    assert by["p1"]["counts"] == {
        "pendente": 1,  # the dead letter keeps its task's processo
        "agendada": 0,
        "processando": 0,
        "falha": 1,  # the exhausted task; its retried first attempt is not counted again
        "falha_processando": 0,
        "sucesso": 1,
        "cancelada": 0,
        "aguardando": 0,  # waiting for parents (docs/how-to/dependencies.md)
    }
    assert by["p2"]["counts"]["pendente"] == 2 and by["p2"]["counts"]["processando"] == 1
    assert by["p1"]["tasks"] == 3 and by["p2"]["tasks"] == 3
    # Both failed attempts count, the retried one too.
    assert by["p1"]["failed_24h"] == 2 and by["p1"]["dead_24h"] == 1
    assert 4 <= by["p2"]["oldest_ready_seconds"] < 120
    assert doc["total"]["tasks"] == sum(p["tasks"] for p in doc["processos"])
    assert [r["processo"] for r in doc["running"]] == ["p2"]
    assert doc["running"][0]["status"] == "processando"
    assert doc["running"][0]["data_hora"].endswith("+00:00")


def test_status_table_is_aligned(queue, capsys):
    populate(queue)
    code, out, err = run(capsys, *queue.args("status"))
    assert code == 0, err
    assert out.startswith(f"queue {queue.table} (")
    blocks = out.strip().split("\n\n")
    summary = blocks[1]
    lines = summary.splitlines()
    assert (
        lines[0].split()
        == (
            "PROCESSO PENDENTE AGENDADA PROCESSANDO FALHA FALHA_PROCESSANDO SUCESSO CANCELADA "
            "AGUARDANDO TASKS "
            "OLDEST_READY FAILED_24H DEAD_24H"
        ).split()
    )
    assert [line.split()[0] for line in lines[1:]] == ["p1", "p2", "TOTAL"]
    # Numbers are right-aligned: every row ends each count column where its header ends.
    header = lines[0]
    end = header.index("TASKS") + len("TASKS")
    for line in lines[1:]:
        assert line[end - 1] != " " and line[end] == " "
    assert all(not line.endswith(" ") for line in out.splitlines())
    assert blocks[2].startswith("running: 1")


# -- tasks --------------------------------------------------------------------------------


def test_tasks_lists_latest_attempts_newest_first_and_filters(queue, capsys):
    t = populate(queue)
    doc = run_json(capsys, *queue.args("tasks"))
    ids = [row["id"] for row in doc["tasks"]]
    # Latest attempts only: the first, requeued attempt of "broken" is not a task.
    assert ids == sorted(ids, reverse=True)
    assert t["broken"] not in ids and t["broken_2"] in ids and t["dead"] in ids
    assert set(ids) == {t[k] for k in ("ok", "running", "broken_2", "dead", "ready", "later")}
    assert doc["has_more"] is False and doc["page"] == 1
    row = next(r for r in doc["tasks"] if r["id"] == t["broken_2"])
    assert row["id_inicial"] == t["broken"] and row["estouro_tentativas"] is True
    assert "payload_hash" not in row and "payload" not in row

    def listed(*argv: str) -> list[int]:
        return [r["id"] for r in run_json(capsys, *queue.args("tasks", *argv))["tasks"]]

    assert listed("--status", "pendente") == [t["later"], t["ready"], t["dead"]]
    assert listed("--status", "sucesso,processando") == [t["running"], t["ok"]]
    assert listed("--processo", "p1") == [t["dead"], t["broken_2"], t["ok"]]
    assert listed("--chave-externa", "chave-ready") == [t["ready"]]
    assert listed("--chave-externa", "x' OR '1'='1") == []  # a bound value, never SQL
    assert listed("--since", "10m", "--processo", "p2") == [t["later"], t["ready"], t["running"]]
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=30)
    assert listed("--since", soon.isoformat()) == [t["later"]]  # first due in an hour
    assert listed("--until", "2000-01-01") == []
    assert t["broken"] in listed("--all-attempts")


def test_tasks_pages(queue, capsys):
    t = populate(queue)
    first = run_json(capsys, *queue.args("tasks", "--limit", "4"))
    second = run_json(capsys, *queue.args("tasks", "--limit", "4", "--page", "2"))
    assert first["has_more"] is True and second["has_more"] is False
    assert len(first["tasks"]) == 4 and len(second["tasks"]) == 2
    ids = [r["id"] for r in first["tasks"] + second["tasks"]]
    assert ids == sorted(set(ids), reverse=True) and t["ok"] in ids

    code, out, _ = run(capsys, *queue.args("tasks", "--limit", "4"))
    assert code == 0
    table, footer = out.strip().split("\n\n")
    assert footer == "page 1, 4 task(s), 4 per page; next: --page 2"
    lines = table.splitlines()
    assert lines[0].split() == (
        "ID TASK PROCESSO STATUS TENTATIVA DEAD DATA_HORA CHAVE_EXTERNA MENSAGEM".split()
    )
    starts = columns_of(table)
    status_at = starts[3]
    for line in lines[1:]:
        # Left-aligned text columns start where their header starts.
        assert line[status_at - 2 : status_at] == "  " and line[status_at] != " "
    code, out, _ = run(capsys, *queue.args("tasks", "--page", "9"))
    assert code == 0 and out.strip() == "no tasks on page 9"


# -- show and retry -----------------------------------------------------------------------


def test_show_a_chain_with_retries_and_a_dead_letter(queue, capsys):
    t = populate(queue)
    for any_attempt in (t["broken"], t["broken_2"]):
        doc = run_json(capsys, *queue.args("show", str(any_attempt)))
        assert doc["task"] == t["broken"] and doc["status"] == "falha"
        attempts = doc["attempts"]
        assert [a["id"] for a in attempts] == [t["broken"], t["broken_2"]]
        assert [a["mensagem"] for a in attempts] == [
            "first error",
            "second error",
        ]
        assert attempts[0]["reenfileirado"] is True
        assert attempts[1]["id_anterior"] == t["broken"] and attempts[1]["tentativa"] == 2
        assert attempts[1]["estouro_tentativas"] is True
        assert json.loads(attempts[0]["payload"]) == {"n": "broken"}
        assert [d["id"] for d in doc["dead_letter"]] == [t["dead"]]
        assert doc["dead_letter"][0]["live_id"] == t["broken"]
        for attempt in attempts:  # each attempt's timeline
            assert attempt["worker"] == "cli-test-worker"
            assert attempt["started_at"] <= attempt["finished_at"]
        assert doc["dead_letter"][0]["started_at"] is None  # not started yet

    code, out, _ = run(capsys, *queue.args("show", str(t["broken"])))
    assert code == 0
    assert out.splitlines()[0] == (
        f"task {t['broken']} (processo p1, chave_externa chave-broken): falha, 2 attempt(s)"
    )
    assert "first error" in out and "second error" in out
    assert out.splitlines()[1].split()[3:6] == ["DATA_HORA", "STARTED_AT", "FINISHED_AT"]
    assert out.count("cli-test-worker") == 2
    assert f"dead letter: task {t['dead']}, pendente" in out
    assert 'payload: {"n":"broken"}' in out


def test_retry_adds_an_attempt_that_a_real_worker_runs(queue, capsys):
    t = populate(queue)
    code, out, err = run(capsys, *queue.args("retry", str(t["running"])))
    assert code == 1 and out == ""
    assert err.strip() == (
        f"nsjq: task {t['running']} is processando (attempt {t['running']}): "
        "only a task that ran out of attempts can be retried"
    )

    doc = run_json(capsys, *queue.args("retry", str(t["broken"])))
    assert doc["task"] == t["broken"] and doc["tentativa"] == 3
    new_id = doc["attempt"]
    chain = run_json(capsys, *queue.args("show", str(t["broken"])))
    latest, before = chain["attempts"][-1], chain["attempts"][-2]
    assert latest["id"] == new_id and latest["status"] == "pendente"
    assert latest["id_inicial"] == t["broken"] and latest["id_anterior"] == t["broken_2"]
    assert latest["status_anterior"] == "falha" and latest["mensagem_anterior"] == "second error"
    assert latest["data_hora"] == before["proxima_tentativa"] and before["reenfileirado"] is True
    # Once: the exhausted attempt is now followed by another.
    code, _, err = run(capsys, *queue.args("retry", str(t["broken"])))
    assert code == 1 and "is pendente" in err

    settings = load({}, dsn=queue.dsn, table=queue.table).database_settings()
    seen: list[str] = []

    def execute(payload, tarefa, bd_conn):
        seen.append(payload)
        return "second chance"

    worker = InProcessWorker(
        function_worker(settings.with_changes(**QUIET_SETTINGS, queue_poll_interval=0.05), execute)
    ).start()
    try:
        wait_for(
            lambda: run_json(capsys, *queue.args("show", str(new_id)))["status"] == "sucesso",
            20,
            "the retried attempt to succeed",
        )
    finally:
        assert worker.stop() == 0
    assert {"n": "broken"} in [json.loads(p) for p in seen]  # the first attempt's payload


# -- ddl / upgrade ------------------------------------------------------------------------


def test_ddl_prints_what_db_gen_prints(capsys):
    from nsj_queue_lib.db_gen import render

    code, out, _ = run(capsys, "--table", "s.q", "ddl", "--dialect", "mysql")
    assert code == 0 and out == render("s", "q", "mysql")
    code, out, _ = run(capsys, "upgrade", "--table", "s.q")  # DB_DRIVER unset: PostgreSQL
    assert code == 0 and out == render("s", "q", "postgres", upgrade=True)
    code, out, _ = run(
        capsys, "--table", "s.q", "upgrade", "--dialect", "mysql", "--server", "mysql"
    )
    assert code == 0 and out == render("s", "q", "mysql", upgrade=True, server="mysql")
    code, _, err = run(capsys, "--table", "s.q", "ddl", "--server", "mysql")  # PostgreSQL
    assert code != 0 and "--server applies to the mysql dialect only" in err


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_ddl_apply_creates_a_usable_queue(dialect, request, capsys):
    from tests.helpers.databases import drop_queue_objects, unique_queue_name
    from tests.helpers.mysql_queue import drop_queue_tables

    name = unique_queue_name("cli_")
    if dialect == "postgres":
        dsn, schema = request.getfixturevalue("pg_dsn"), "public"
        admin = request.getfixturevalue("pg_admin")
        request.addfinalizer(lambda: drop_queue_objects(admin, schema, name))
    else:
        dsn = request.getfixturevalue("mysql_dsn")
        schema = request.getfixturevalue("mysql_kwargs")["database"]
        admin = request.getfixturevalue("mysql_admin")
        request.addfinalizer(lambda: drop_queue_tables(admin, schema, name))
    queue = Queue(dsn, f"{schema}.{name}", schema, name)
    code, out, err = run(capsys, *queue.args("ddl", "--apply"))
    assert code == 0, err
    assert out.startswith(f"created {queue.table} (")
    code, out, err = run(capsys, *queue.args("upgrade", "--apply"))  # idempotent
    assert code == 0, err
    t = populate(queue)  # claims through the queue's own claim routine path
    assert run_json(capsys, *queue.args("show", str(t["ok"])))["status"] == "sucesso"
    if dialect == "mysql":
        # --apply asked the server (SELECT VERSION()): MariaDB's variant.
        from nsj_queue_lib.db.mysql.dialect import claim_procedure_version

        with admin.cursor() as cur:
            cur.execute(
                "SELECT routine_comment FROM information_schema.routines "
                "WHERE routine_schema = %s AND routine_name = %s",
                (schema, f"claim_next_{name}_v2"),
            )
            assert cur.fetchone()[0] == claim_procedure_version("mariadb")


def test_upgrade_apply_layout_partitioned_moves_a_populated_plain_queue(pg_queue, pg_dsn, capsys):
    """docs/how-to/partition-a-queue.md: the command, then the same again (nothing to move)."""
    queue = Queue(pg_dsn, pg_queue.table, pg_queue.schema, pg_queue.name)
    t = populate(queue)

    def counts() -> list:
        status = run_json(capsys, *queue.args("status"))
        return [(p["processo"], p["counts"]) for p in status["processos"]]

    before = counts()
    code, out, err = run(capsys, *queue.args("upgrade", "--apply", "--layout", "partitioned"))
    assert code == 0, err
    assert f"migrated {queue.table} to the partitioned layout: the swap held the table" in out
    assert counts() == before
    assert run_json(capsys, *queue.args("show", str(t["ok"])))["status"] == "sucesso"
    code, out, err = run(capsys, *queue.args("upgrade", "--apply", "--layout", "partitioned"))
    assert code == 0, err
    assert out == f"upgraded {queue.table} (partitioned layout, in one transaction)\n"


def test_ddl_apply_with_server_mysql_creates_the_mysql_variant(request, capsys):
    """MariaDB runs the MySQL variant too: --server mysql is applied as asked, and the
    worker's claims work on it."""
    from nsj_queue_lib.db.mysql.dialect import claim_procedure_version
    from tests.helpers.databases import unique_queue_name
    from tests.helpers.mysql_queue import drop_queue_tables

    name = unique_queue_name("cli_")
    dsn = request.getfixturevalue("mysql_dsn")
    schema = request.getfixturevalue("mysql_kwargs")["database"]
    admin = request.getfixturevalue("mysql_admin")
    request.addfinalizer(lambda: drop_queue_tables(admin, schema, name))
    queue = Queue(dsn, f"{schema}.{name}", schema, name)
    code, _, err = run(capsys, *queue.args("ddl", "--apply", "--server", "mysql"))
    assert code == 0, err
    code, _, err = run(capsys, *queue.args("upgrade", "--apply", "--server", "mysql"))
    assert code == 0, err
    with admin.cursor() as cur:
        cur.execute(
            "SELECT routine_comment FROM information_schema.routines "
            "WHERE routine_schema = %s AND routine_name = %s",
            (schema, f"claim_next_{name}_v2"),
        )
        assert cur.fetchone()[0] == claim_procedure_version("mysql")
    t = populate(queue)
    assert run_json(capsys, *queue.args("show", str(t["ok"])))["status"] == "sucesso"


# -- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--table", "public.q; DROP TABLE x", "status"], "queue table"),
        (["--table", "a.b.c", "tasks"], "queue table"),
        (["--dsn", "ftp://h/db", "--table", "s.q", "status"], "unknown DSN scheme 'ftp'"),
        (["--dsn", "mysql://secret@/", "--table", "s.q", "status"], "--dsn: expected mysql://"),
        (
            ["--dsn", "host=h application_name=x user=u", "--table", "s.q", "status"],
            "application_name",
        ),
        (["--dsn", "not a conninfo", "--table", "s.q", "status"], "libpq"),
        (["--table", "s.q", "status"], "DB_HOST"),
        (["status"], "no queue table"),
        (["--table", "q", "ddl"], "must be schema.name"),
        (["--table", "s.q", "ddl", "--dialect", "mysql", "--apply"], "--dialect is for printing"),
        (["--table", "s.q", "show", "abc"], "not a whole number"),
        (["--table", "s.q", "tasks", "--limit", "5000"], "at most 1000"),
        (["--table", "s.q", "tasks", "--since", "yesterday"], "not a time"),
        ([], "a command is required"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_usage_is_refused_with_exit_2_and_one_line(argv, message, capsys):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("nsjq: ") and message in err, err
    assert "secret" not in err


def test_a_missing_table_or_task(queue, capsys):
    code, _, err = run(capsys, *queue.args("show", "999999999"))
    assert code == 1 and err.strip() == f"nsjq: task 999999999 not found in {queue.table}"
    code, _, err = run(capsys, "--dsn", queue.dsn, "--table", f"{queue.namespace}.nope", "status")
    assert code == 2 and err.startswith("nsjq: database: ") and err.count("\n") == 1


# -- the real command ---------------------------------------------------------------------


def _command(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "nsj_queue_lib", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def test_python_dash_m_runs_the_command(pg_queue, pg_dsn):
    from importlib import metadata

    done = _command("--version")
    assert (
        done.returncode == 0 and done.stdout.strip() == f"nsjq {metadata.version('nsj-queue-lib')}"
    )
    done = _command("--dsn", pg_dsn, "--table", pg_queue.table, "status", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"]["tasks"] == 0
    done = _command("--dsn", pg_dsn, "--table", pg_queue.table, "show", "1")
    assert done.returncode == 1 and "not found" in done.stderr
    done = _command("--table", "bad name", "status")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_two_concurrent_retries_add_one_attempt(queue):
    import threading

    t = populate(queue)
    driver = _driver(queue)
    store = driver.inspection_store()
    first, second = driver.connect(autocommit=False), driver.connect(autocommit=False)
    try:
        assert store.retry_task(first, t["broken_2"]) is not None  # not committed yet
        results: list[int | None] = []
        racer = threading.Thread(
            target=lambda: results.append(store.retry_task(second, t["broken"]))
        )
        racer.start()
        racer.join(0.5)
        assert racer.is_alive()  # waits for the first retry's row lock
        first.commit()
        racer.join(10)
        second.commit()
        assert results == [None]
    finally:
        close_quietly(first)
        close_quietly(second)
    look = driver.connect()
    try:
        attempts = [r for r in store.task_chain(look, t["broken"]) if not r["dead"]]
    finally:
        close_quietly(look)
    assert [a["tentativa"] for a in attempts] == [1, 2, 3]


def test_cancel_cancels_a_waiting_task_asks_a_running_one_and_leaves_a_finished_one(queue, capsys):
    t = populate(queue)
    doc = run_json(capsys, *queue.args("cancel", str(t["later"])))
    assert doc == {"task": t["later"], "attempt": t["later"], "status": "cancelada"}
    code, out, _ = run(capsys, *queue.args("cancel", str(t["running"])))
    assert code == 0 and "cancel requested" in out
    code, out, _ = run(capsys, *queue.args("cancel", str(t["ok"])))
    assert code == 0 and "already finished (sucesso)" in out
    code, out, err = run(capsys, *queue.args("cancel", "987654321"))
    assert code == 1 and "not found" in err
    status = run_json(capsys, *queue.args("status"))
    assert status["total"]["counts"]["cancelada"] == 1
    chain = run_json(capsys, *queue.args("show", str(t["running"])))
    assert chain["status"] == "processando"
    assert run_json(capsys, *queue.args("show", str(t["later"])))["status"] == "cancelada"


# -- pause and resume (docs/fleet-control.md) -----------------------------------------------


def test_pause_and_resume_a_processo_and_the_queue_shown_by_status(queue, capsys):
    assert run_json(capsys, *queue.args("status"))["paused"] == []
    code, out, err = run(capsys, *queue.args("pause", "p1", "--until", "2030-01-02T03:04:05Z"))
    assert (code, err) == (0, "")
    assert out == "processo 'p1' paused until 2030-01-02T03:04:05+00:00\n"
    assert run_json(capsys, *queue.args("pause")) == {"paused": None, "until": None}
    status = run_json(capsys, *queue.args("status"))
    assert status["paused"] == [
        {"processo": None, "until": None},
        {"processo": "p1", "until": "2030-01-02T03:04:05+00:00"},
    ]
    code, out, _ = run(capsys, *queue.args("status"))
    assert "PAUSED: the whole queue until resumed\n" in out
    assert "PAUSED: processo p1 until 2030-01-02T03:04:05+00:00\n" in out
    assert run_json(capsys, *queue.args("resume")) == {"resumed": None, "was_paused": True}
    code, out, _ = run(capsys, *queue.args("resume", "p1"))
    assert out == "processo 'p1' resumed\n"
    code, out, _ = run(capsys, *queue.args("resume", "p1"))
    assert out == "processo 'p1' was not paused\n"
    assert run_json(capsys, *queue.args("status"))["paused"] == []


def test_pause_until_a_duration_from_now(queue, capsys):
    before = datetime.datetime.now(datetime.timezone.utc)
    run(capsys, *queue.args("pause", "p2", "--until", "30m"))
    [pause] = run_json(capsys, *queue.args("status"))["paused"]
    until = datetime.datetime.fromisoformat(pause["until"])
    assert 29 * 60 < (until - before).total_seconds() < 31 * 60
    code, _, err = run(capsys, *queue.args("pause", "--until", "someday"))
    assert code == 2 and "is not a time" in err


def test_status_shows_the_circuit_breakers_with_failures_or_open(queue, capsys):
    conn = _driver(queue).connect(autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute(
            f"INSERT INTO {queue.table}_limits (processo, breaker_failures) VALUES ('p1', 2)"
        )
        cur.execute(
            f"INSERT INTO {queue.table}_limits (processo, breaker_open, breaker_trial)"
            " VALUES ('p2', TRUE, TRUE)"
        )
    finally:
        close_quietly(conn)
    status = run_json(capsys, *queue.args("status"))
    assert status["circuit_breakers"] == [
        {"processo": "p1", "failures": 2, "state": "closed", "until": None},
        {"processo": "p2", "failures": 0, "state": "half_open", "until": None},
    ]
    _, out, _ = run(capsys, *queue.args("status"))
    assert "CIRCUIT BREAKER of processo p2: half-open (0 consecutive failures)\n" in out


def test_status_shows_the_webhook_subscribers_circuit_breakers(queue, capsys):
    conn = _driver(queue).connect(autocommit=True)
    try:
        conn.cursor().execute(
            f"INSERT INTO {queue.table}_subscriber (id, processo, url, breaker_open, breaker_trial)"
            " VALUES ('hook', 'p1', 'http://127.0.0.1:9/', TRUE, TRUE)"
        )
    finally:
        close_quietly(conn)
    status = run_json(capsys, *queue.args("status"))
    assert status["subscriber_circuit_breakers"] == [
        {"subscriber": "hook", "failures": 0, "state": "half_open", "until": None},
    ]
    _, out, _ = run(capsys, *queue.args("status"))
    assert "CIRCUIT BREAKER of webhook subscriber hook: half-open (0 consecutive failures)\n" in out


def test_breaker_reset_closes_a_webhook_subscriber_s_circuit_breaker(queue, capsys):
    conn = _driver(queue).connect(autocommit=True)
    try:
        conn.cursor().execute(
            f"INSERT INTO {queue.table}_subscriber (id, processo, url, breaker_open, breaker_trial,"
            " breaker_trial_task) VALUES ('hook', 'p1', 'http://127.0.0.1:9/', TRUE, TRUE, 41)"
        )
    finally:
        close_quietly(conn)
    code, out, _ = run(capsys, *queue.args("breaker", "reset", "hook", "--subscriber"))
    assert code == 0 and out == "circuit breaker of webhook subscriber 'hook' closed\n"
    assert run_json(capsys, *queue.args("status"))["subscriber_circuit_breakers"] == []
    assert run_json(capsys, *queue.args("breaker", "reset", "hook", "--subscriber")) == {
        "subscriber_breaker_reset": "hook",
        "was_tripped": False,
    }


def test_breaker_reset_closes_a_processo_s_circuit_breaker(queue, capsys):
    conn = _driver(queue).connect(autocommit=True)
    try:
        conn.cursor().execute(
            f"INSERT INTO {queue.table}_limits (processo, breaker_open, breaker_trial,"
            " breaker_trial_task) VALUES ('p2', TRUE, TRUE, 41)"
        )
    finally:
        close_quietly(conn)
    code, out, _ = run(capsys, *queue.args("breaker", "reset", "p2"))
    assert code == 0 and out == "circuit breaker of processo 'p2' closed\n"
    assert run_json(capsys, *queue.args("status"))["circuit_breakers"] == []
    assert run_json(capsys, *queue.args("breaker", "reset", "p2")) == {
        "breaker_reset": "p2",
        "was_tripped": False,
    }
