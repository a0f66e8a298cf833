"""A queue made by the original nsj-queue-lib 1.2.2 keeps working after ``db_gen --upgrade``.

For real: nsj-queue-lib 1.2.2 is installed from PyPI into a throwaway venv
(cached between runs under the temporary directory), ITS ``db_gen`` creates
the queue, OUR ``--upgrade`` output is applied twice, and ITS ``QueueClient``
(in a subprocess of that venv) enqueues tasks that OUR code then finds.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db_gen import render
from nsj_queue_lib.payload import payload_hash
from tests.helpers.databases import (
    ci_enabled,
    collect_until_sentinel,
    connect_pg,
    create_queue,
    drop_queue,
    drop_queue_objects,
    queue_catalog,
    unique_queue_name,
)
from tests.helpers.pg_plans import CLAIM_PATHS, claim_plan, plan_nodes

pytestmark = pytest.mark.slow  # the first run installs 1.2.2 from PyPI (~20 s); later runs reuse it

LEGACY = "1.2.2"
CACHE = Path(tempfile.gettempdir()) / "nsj_queue_lib-tests"
VENV = CACHE / f"venv-nsj-queue-lib-{LEGACY}-py{sys.version_info[0]}{sys.version_info[1]}"
INSTALL_TIMEOUT = 600


def _unavailable(reason: str) -> None:
    if ci_enabled():
        pytest.fail(f"{reason} (CI=true: the 1.2.2 upgrade test must run)", pytrace=False)
    pytest.skip(reason)


def _install_legacy_venv() -> None:
    shutil.rmtree(VENV, ignore_errors=True)
    python = VENV / "bin" / "python"
    steps = [
        [sys.executable, "-m", "venv", str(VENV)],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"nsj-queue-lib=={LEGACY}",
        ],
    ]
    for command in steps:
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            _unavailable(
                f"installing nsj-queue-lib=={LEGACY} took more than {INSTALL_TIMEOUT}s (no network?)"
            )
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
            _unavailable(
                f"cannot install nsj-queue-lib=={LEGACY} from PyPI (no network?): "
                + " | ".join(tail)
            )


def _usable(python: Path) -> bool:
    """The cached venv still works (a temp cleaner may have removed parts of it)."""
    try:
        check = subprocess.run(
            [str(python), "-c", "import psycopg2, nsj_queue_lib.db_gen"],
            cwd=CACHE,
            capture_output=True,
            timeout=60,
        )
    except OSError:
        return False
    return check.returncode == 0


@pytest.fixture(scope="session")
def legacy_python() -> Path:
    """The python of a venv holding nsj-queue-lib 1.2.2 (installed once, then reused)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    marker = VENV / ".nsj-queue-lib-installed"
    with open(CACHE / f"{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test runs install it once
        if not marker.exists() or not _usable(VENV / "bin" / "python"):
            _install_legacy_venv()
            marker.write_text(LEGACY)
    return VENV / "bin" / "python"


def run_legacy(
    legacy_python: Path, workdir: Path, args: list[str], env: dict[str, str] | None = None
) -> str:
    """Run the legacy interpreter outside the repository, so that ITS nsj_queue_lib is imported."""
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    environ.update(env or {})
    result = subprocess.run(
        [str(legacy_python), *args],
        cwd=workdir,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"legacy {args[:3]} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


LEGACY_CLIENT = textwrap.dedent(
    """
    import json, sys

    import psycopg2
    import nsj_queue_lib
    from nsj_queue_lib.queue_client import QueueClient

    dsn, table, subscriber_table, insert, lookups = sys.argv[1:6]
    conn = psycopg2.connect(dsn)
    client = QueueClient(conn, table, subscriber_table)
    for task in json.loads(insert):
        client.insert_task(**task)
    found = [[row["id"] for row in client.list_equivalent_task(**args)] for args in json.loads(lookups)]
    conn.commit()
    conn.close()
    print(json.dumps({"module": nsj_queue_lib.__file__, "found": found}))
    """
)


def legacy_client(legacy_python, workdir, dsn, queue, insert=(), lookups=()) -> list[list[int]]:
    """Insert tasks and list equivalents with the ORIGINAL QueueClient; returns the ids found per lookup."""
    script = workdir / "legacy_client.py"
    script.write_text(LEGACY_CLIENT)
    params = conninfo_to_dict(dsn)
    # The original settings module reads these at import time and refuses to
    # start without them; the client itself uses the connection given to it.
    env = {
        "DB_HOST": str(params.get("host") or "localhost"),
        "DB_PORT": str(params.get("port") or 5432),
        "DB_BASE": str(params.get("dbname") or "postgres"),
        "DB_USER": str(params.get("user") or "postgres"),
        "DB_PASS": str(params.get("password") or "unused"),
        "QUEUE_NAME": queue.name,
        "QUEUE_TABLE": queue.table,
        "QUEUE_SUBSCRIBER_TABLE": queue.subscriber_table,
    }
    out = run_legacy(
        legacy_python,
        workdir,
        [
            str(script),
            dsn,
            queue.table,
            queue.subscriber_table,
            json.dumps(list(insert)),
            json.dumps(list(lookups)),
        ],
        env,
    )
    report = json.loads(out.strip().splitlines()[-1])
    assert str(VENV) in report["module"], f"imported the wrong nsj_queue_lib: {report['module']}"
    return report["found"]


class LegacyQueue:
    """Names of a queue created by 1.2.2's db_gen (same shape as PgQueue)."""

    def __init__(self, name: str, dsn: str):
        self.name, self.dsn, self.schema = name, dsn, "public"
        self.table = f"public.{name}"
        self.subscriber_table = f"public.{name}_subscriber"


@pytest.fixture
def legacy_queue(legacy_python, pg_dsn, pg_admin, tmp_path):
    queue = LegacyQueue(unique_queue_name("q_")[:10], pg_dsn)  # 1.2.2 index names are long
    ddl = run_legacy(legacy_python, tmp_path, ["-m", "nsj_queue_lib.db_gen", "public", queue.name])
    assert f"create table public.{queue.name} (" in ddl
    pg_admin.execute(ddl)
    try:
        yield queue
    finally:
        drop_queue_objects(pg_admin, "public", queue.name)


@pytest.fixture
def reference_catalog(pg_dsn, pg_admin, pg_autocommit):
    """The catalog of a queue created by our generator, for comparison."""
    queue = create_queue(pg_admin, pg_dsn)
    try:
        yield queue_catalog(pg_autocommit, "public", queue.name)
    finally:
        drop_queue(pg_admin, queue)


ORIGINAL_TASK = dict(
    origem="teste",
    destino="teste_destino",
    processo="processo_teste",
    chave_externa="1234567",
    payload="conteúdo da mensagem",
    tenant=1,
    grupo_empresarial="grupo",
)


def test_upgrade_of_a_real_1_2_2_queue(
    legacy_python, legacy_queue, reference_catalog, pg_admin, pg_autocommit, pg_dsn, tmp_path
):
    queue = legacy_queue
    # A task enqueued by 1.2.2 before the upgrade.
    before_task = dict(ORIGINAL_TASK, chave_externa="antes")
    [[before_id]] = legacy_client(
        legacy_python, tmp_path, pg_dsn, queue, [before_task], [before_task]
    )

    original = queue_catalog(pg_autocommit, "public", queue.name)
    assert "idx_{q}_claim" not in original["indexes"]  # the upgrade has work to do
    assert "<> 'agendada'" in original["triggers"]["trigger_insert_{q}"]

    upgrade = render("public", queue.name, upgrade=True)
    pg_admin.execute(upgrade)
    once = queue_catalog(pg_autocommit, "public", queue.name)
    pg_admin.execute(upgrade)  # idempotent: a second run succeeds and changes nothing
    assert queue_catalog(pg_autocommit, "public", queue.name) == once

    # Now the queue has everything ours has, defined the same way.
    for column, definition in reference_catalog["columns"].items():
        assert once["columns"].get(column) == definition, column
    for index, definition in reference_catalog["indexes"].items():
        assert once["indexes"].get(index) == definition, index
    assert once["triggers"] == reference_catalog["triggers"]
    assert once["function"] == reference_catalog["function"]
    for index, definition in reference_catalog["subscriber_indexes"].items():
        assert once["subscriber_indexes"].get(index) == definition, index
    # Nothing the original had was lost (its extra indexes stay).
    assert set(original["indexes"]) <= set(once["indexes"])
    assert set(original["subscriber_indexes"]) <= set(once["subscriber_indexes"])
    assert set(original["columns"]) <= set(once["columns"])

    # The 1.2.2 client still enqueues into the upgraded table, and our trigger wakes workers.
    after_task = dict(ORIGINAL_TASK, prioridade=100)
    with connect_pg(pg_dsn, "psycopg", autocommit=True) as listener:
        listener.execute(f"LISTEN {queue.name}")
        [[after_id]] = legacy_client(
            legacy_python, tmp_path, pg_dsn, queue, [after_task], [ORIGINAL_TASK]
        )
        assert collect_until_sentinel(listener, pg_admin, queue.name) == [""]

    # Tasks written by 1.2.2 (before and after the upgrade) are read by our code.
    for driver in ("psycopg", "psycopg2"):
        with connect_pg(pg_dsn, driver) as conn:
            store = PostgresQueueStore(queue.table, queue.subscriber_table)
            row = store.get_task(conn, after_id)
            assert row["payload"] == "conteúdo da mensagem"
            assert row["payload_hash"] == payload_hash(
                "conteúdo da mensagem"
            )  # same hash as 1.2.2's
            assert (
                row["status"],
                row["tentativa"],
                row["prioridade"],
                row["tenant"],
                row["grupo_empresarial"],
            ) == (
                "pendente",
                1,
                100,
                1,
                "grupo",
            )
            assert (row["pub_sub"], row["dead"]) == (False, False)
            assert store.get_task(conn, before_id)["chave_externa"] == "antes"

            client = QueueClient(conn, queue.table, queue.subscriber_table)
            assert [r["id"] for r in client.list_equivalent_task(**ORIGINAL_TASK)] == [after_id]
            assert [r["id"] for r in client.list_equivalent_task(**before_task)] == [before_id]
            conn.rollback()

    # And the other way round: 1.2.2 finds what our client enqueued.
    ours = dict(ORIGINAL_TASK, chave_externa="nosso")
    with connect_pg(pg_dsn, "psycopg") as conn:
        our_id = QueueClient(conn, queue.table, queue.subscriber_table).insert_task(**ours)
        conn.commit()
    assert legacy_client(legacy_python, tmp_path, pg_dsn, queue, [], [ours]) == [[our_id]]


@pytest.mark.parametrize("path", CLAIM_PATHS)
def test_claim_on_an_upgraded_queue_uses_the_claim_index(
    path, legacy_queue, pg_admin, pg_autocommit
):
    pg_admin.execute(render("public", legacy_queue.name, upgrade=True))
    pg_admin.execute(
        f"INSERT INTO {legacy_queue.table} (processo, status) "
        "SELECT 'p', CASE WHEN g % 20 = 0 THEN 'pendente' ELSE 'sucesso' END FROM generate_series(1, 20000) g"
    )
    pg_admin.execute(f"ANALYZE {legacy_queue.table}")
    plan = claim_plan(pg_autocommit, legacy_queue.table, path)
    indexes = {node.get("Index Name") for node in plan_nodes(plan)}
    assert f"idx_{legacy_queue.name}_claim" in indexes, json.dumps(plan, indent=1)
