"""nsj-queue-lib 1.2.2, the release this library replaces, for tests that run it for real.

It is installed from the package index into a throwaway venv once (cached
under the temporary directory, shared by every test and every test run;
concurrent runs install it once, under a file lock).

- ``legacy_python`` (session fixture): that venv's python.
- ``run_legacy(python, workdir, args, env)``: run it outside the repository, so
  that 1.2.2's ``nsj_queue_lib`` is the one imported.
- ``legacy_client(...)``: insert and list tasks with 1.2.2's ``QueueClient``.
- ``legacy_queue`` (fixture): a queue created by 1.2.2's ``db_gen``
  (``LegacyQueue``: the same names as ``PgQueue``), dropped afterwards.
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

from tests.helpers.databases import ci_enabled, drop_queue_objects, unique_queue_name

# 1.2.2 keys a task's lock by its id alone (pg_advisory_lock(id)), database-wide: task 1 of
# every queue shares a key. Tests that take or check such keys run on one pytest-xdist
# worker, one after the other (make test's --dist loadgroup).
LEGACY_KEYS = pytest.mark.xdist_group("legacy_1_2_2_keys")

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


ALL_MINUTES = ",".join(str(m) for m in range(60))


def legacy_worker_env(dsn: str, queue: LegacyQueue, **extra: str) -> dict[str, str]:
    """The environment a 1.2.2 worker needs (its settings module refuses to import without
    it), with its retry thread checking every 15 s (every minute of the hour listed)."""
    params = conninfo_to_dict(dsn)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DB_HOST": str(params.get("host") or "localhost"),
        "DB_PORT": str(params.get("port") or 5432),
        "DB_BASE": str(params.get("dbname") or "postgres"),
        "DB_USER": str(params.get("user") or "postgres"),
        "DB_PASS": str(params.get("password") or "unused"),  # 1.2.2 requires one
        "DB_DRIVER": "POSTGRES",
        "QUEUE_NAME": queue.name,
        "QUEUE_TABLE": queue.table,
        "QUEUE_SUBSCRIBER_TABLE": queue.subscriber_table,
        "QUEUE_MINUTE_RETRY_THREAD": ALL_MINUTES,
        "QUEUE_BASE_INTERVAL_RETRY": "0",  # 1.2.2 reads whole minutes
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra)
    return env
