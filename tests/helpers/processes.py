"""Running workers in tests: real processes, in-process runtimes, deadlines.

- ``wait_for(condition, timeout, what)``: poll a condition until it holds or a
  deadline passes, then fail saying what was awaited and what was last seen.
  Tests wait on observable state (rows, processes, pg_stat_activity), never
  on a blind sleep.
- ``run_python`` / ``python_report`` / ``script_process``: other Python
  scripts (the examples, db_gen, import checks) run from the repository root.
- ``worker_env`` / ``WorkerProcess``: a worker script started with
  ``python <script>`` and an environment built from a test DSN; its stderr
  goes to a file that tests read (last line, logs) and print on failure.
  ``workers_of`` gives a test's fixture the ``Workers`` it starts.
- ``settings_for`` / ``InProcessWorker``: a ``WorkerBase`` run with
  ``run_until_stopped(install_signal_handlers=False)`` in a thread
  (``start_function_worker``); ``QUIET_SETTINGS`` / ``QUIET_ENV`` keep the
  maintenance services out of a test's way.
- ``ThrowawayPostgres``: a private PostgreSQL (pgserver's binaries) that tests
  may stop, crash and start again; the shared test database is never restarted.
- Queue side tables (``<queue>_exec``, ``<queue>_started``) the test workers write.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKERS_DIR = ROOT / "tests" / "acceptance" / "workers"
POLL_INTERVAL = 0.02


# -- deadlines -------------------------------------------------------------------


def wait_for(
    condition: Callable[[], Any], timeout: float, what: str, interval: float = POLL_INTERVAL
) -> Any:
    """Call ``condition`` until it returns a truthy value; return that value.

    Fails with ``what`` and the last value seen once ``timeout`` seconds pass.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what} (last seen: {last!r})"
            )
        time.sleep(interval)


# -- python subprocesses ------------------------------------------------------------

# Variables that would change what a script does: never inherited from the developer's shell.
OWN_PREFIXES = (
    "DB_",
    "DATABASE_",
    "QUEUE_",
    "EXAMPLE_",
    "DEMO_",
    "LOG_DEBUG",
    "GRAFANA_URL",
    "DEFAULT_WEBHOOK",
)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any of ``OWN_PREFIXES``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(OWN_PREFIXES)}
    env.update(extra, PYTHONUNBUFFERED="1")
    return env


def run_python(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """``python <args>`` in the repository root, run to its end; its output as UTF-8 text."""
    return subprocess.run(
        [sys.executable, *args],
        env=None if env is None else dict(env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )


def python_report(script: str, env: Mapping[str, str], timeout: float = 60) -> Any:
    """``python -c <script>`` must exit with 0; the JSON on the last line of its stdout."""
    result = run_python("-c", script, env=env, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def script_process(script: str | Path, env: Mapping[str, str]) -> Iterator[subprocess.Popen]:
    """``python <script>`` for a ``with`` block, its output (text) on ``stdout``.

    ``stop_script`` ends it cleanly; one still running when the block ends
    (the test failed) is killed.
    """
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        env=dict(env),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def stop_script(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM: ``proc`` must exit with 0 within ``timeout`` seconds."""
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout)
    assert code == 0, proc.stdout.read()


# -- connection parameters ---------------------------------------------------------


def dsn_params(dsn: str) -> dict[str, str]:
    """host, port, dbname, user, password of a libpq conninfo or URI."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    return {
        "host": str(params.get("host") or "127.0.0.1"),
        "port": str(params.get("port") or "5432"),
        "dbname": str(params.get("dbname") or params.get("user") or "postgres"),
        "user": str(params.get("user") or "postgres"),
        "password": str(params.get("password") or ""),
    }


def db_env(dsn: str) -> dict[str, str]:
    """The DB_* variables of a worker on a libpq DSN (conninfo or URI)."""
    p = dsn_params(dsn)
    return dict(
        DB_HOST=p["host"],
        DB_PORT=p["port"],
        DB_BASE=p["dbname"],
        DB_USER=p["user"],
        DB_PASS=p["password"],
    )


# What keeps a worker quiet, so that a test only sees the services it asks for: the
# maintenance services run once an hour, a retry is due at once. In-process workers
# (settings) wait a minute for a notification, worker processes (environment) a second.
QUIET_SETTINGS: dict[str, Any] = dict(
    queue_wait_notify_interval=60.0,
    queue_retry_thread_interval=3600.0,
    queue_notify_thread_interval=3600.0,
    queue_purge_thread_interval=3600.0,
    queue_base_interval_retry=0.001,
    queue_grace_period=5.0,
)
QUIET_ENV: dict[str, str] = dict(
    QUEUE_WAIT_NOTIFY_INTERVAL="1",
    QUEUE_RETRY_THREAD_INTERVAL="3600",
    QUEUE_NOTIFY_THREAD_INTERVAL="3600",
    QUEUE_PURGE_THREAD_INTERVAL="3600",
    QUEUE_BASE_INTERVAL_RETRY="0.001",
)


def db_settings(dsn: str) -> dict[str, Any]:
    """The db_* fields of ``Settings`` for a libpq DSN (conninfo or URI)."""
    p = dsn_params(dsn)
    return dict(
        db_host=p["host"],
        db_port=int(p["port"]),
        db_name=p["dbname"],
        db_user=p["user"],
        db_pass=p["password"],
    )


def with_overrides(env: dict[str, str], overrides: Mapping[str, Any]) -> dict[str, str]:
    """``env`` with each of ``overrides`` set (as text), or removed where it is None."""
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def worker_env(dsn: str, table: str, name: str | None = None, **overrides: Any) -> dict[str, str]:
    """The environment of a worker process on queue ``table`` (``schema.name``).

    Maintenance intervals are large unless overridden, so a test only sees the
    services it asks for. ``None`` in ``overrides`` removes a variable.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DB_", "DATABASE_", "QUEUE_"))}
    env.update(
        db_env(dsn),
        QUEUE_NAME=name or table.split(".")[-1],
        QUEUE_TABLE=table,
        **QUIET_ENV,
        TEST_EXEC_TABLE=f"{table}_exec",
        TEST_STARTED_TABLE=f"{table}_started",
        PYTHONUNBUFFERED="1",
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return with_overrides(env, overrides)


def settings_for(dsn: str, table: str, **changes: Any):
    """``Settings`` for an in-process worker on ``table``, with short intervals."""
    from nsj_queue_lib.settings import Settings

    values: dict[str, Any] = dict(
        db_settings(dsn), queue_name=table.split(".")[-1], queue_table=table, **QUIET_SETTINGS
    )
    values.update(changes)
    return Settings(**values)


# -- side tables the test handlers write -------------------------------------------


def create_side_tables(admin_conn, table: str) -> None:
    """``<table>_exec`` (one row per committed execution) and ``<table>_started``."""
    admin_conn.execute(
        f"CREATE TABLE {table}_exec (task_id bigint NOT NULL, chave text, pid integer, "
        f"at timestamptz NOT NULL DEFAULT clock_timestamp());"
        f"CREATE TABLE {table}_started (task_id bigint NOT NULL, pid integer, "
        f"at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )


def drop_side_tables(admin_conn, table: str) -> None:
    admin_conn.execute(f"DROP TABLE IF EXISTS {table}_exec; DROP TABLE IF EXISTS {table}_started")


def listening_backends(conn, channel: str) -> int:
    """How many sessions have LISTENed on ``channel`` (their last statement)."""
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
        (f'LISTEN "{channel}"',),
    ).fetchone()[0]


def statuses(conn, table: str) -> dict[str, int]:
    return dict(conn.execute(f"SELECT status, count(*) FROM {table} GROUP BY status").fetchall())


# -- worker processes ----------------------------------------------------------------


class WorkerProcess:
    """``python <script>`` with its stderr in a temporary file."""

    def __init__(
        self,
        script: str | Path,
        env: Mapping[str, str],
        name: str = "worker",
        python: str | Path = sys.executable,
        cwd: str | Path = ROOT,
    ):
        self.script = Path(script)
        if not self.script.is_absolute():
            self.script = WORKERS_DIR / self.script
        self.name = name
        self._log = tempfile.NamedTemporaryFile(prefix=f"nsjq-{name}-", suffix=".log", delete=False)
        self.log_path = Path(self._log.name)
        self.proc = subprocess.Popen(
            [str(python), str(self.script)],
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, signum: int) -> None:
        if self.alive():
            self.proc.send_signal(signum)

    def kill9(self) -> None:
        self.send(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def wait(self, timeout: float) -> int:
        """The exit code; fails (with the log) when the process runs past ``timeout``."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} (pid {self.pid}) still running after {timeout:g} s; log:\n{self.output()[-4000:]}"
            ) from None

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def last_line(self) -> str:
        lines = [line for line in self.output().splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def cpu_seconds(self) -> float:
        import psutil

        times = psutil.Process(self.pid).cpu_times()
        return times.user + times.system

    def close(self) -> None:
        """Kill the process if it still runs and remove its log."""
        if self.alive():
            self.proc.kill()
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=10)
        self._log.close()
        with contextlib.suppress(OSError):
            self.log_path.unlink()


class Workers:
    """Every worker process a test starts; all are killed at the end of the test."""

    def __init__(self) -> None:
        self.started: list[WorkerProcess] = []

    def start(
        self, script: str | Path, env: Mapping[str, str], name: str | None = None, **how: Any
    ) -> WorkerProcess:
        """``how``: ``python`` (another interpreter) and ``cwd``, as ``WorkerProcess`` takes."""
        worker = WorkerProcess(script, env, name or f"worker{len(self.started) + 1}", **how)
        self.started.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(
            f"--- {w.name} (pid {w.pid}) ---\n{w.output()[-3000:]}" for w in self.started
        )

    def close(self) -> None:
        for worker in self.started:
            worker.close()


@contextlib.contextmanager
def workers_of(request) -> Iterator[Workers]:
    """The ``Workers`` of a test (a fixture's body): every one is killed at the end, and
    their logs are printed when the test failed (``rep_call``, set by a conftest hook)."""
    started = Workers()
    yield started
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed and started.started:
        print(started.logs())
    started.close()


# -- in-process workers ------------------------------------------------------------------


class InProcessWorker:
    """A ``WorkerBase`` running ``run_until_stopped`` in a thread; ``stop()`` returns its exit code."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="test-worker", daemon=True)

    def _main(self) -> None:
        try:
            self.exit_code = self.worker.run_until_stopped(install_signal_handlers=False)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def start(self) -> InProcessWorker:
        self.thread.start()
        return self

    @property
    def runtime(self):
        return wait_for(lambda: self.worker._runtime, 5, "the worker's runtime to exist")

    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout: float = 15) -> int | None:
        self.worker.stop()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"the in-process worker did not stop within {timeout} s")
        if self.error is not None:
            raise AssertionError(f"run_until_stopped raised {self.error!r}") from self.error
        return self.exit_code


# -- a PostgreSQL of our own, to restart -----------------------------------------------------


class ThrowawayPostgres:
    """A private PostgreSQL (pgserver's binaries, unix socket) that can be stopped and started.

    ``stop(mode)`` uses ``pg_ctl -m fast|immediate``; ``start()`` brings it back on
    the same socket with the same data.
    """

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pgserver._commands import pg_ctl

        from tests.helpers.databases import start_pgserver

        self._pg_ctl = pg_ctl
        self.directory = Path(tempfile.mkdtemp(prefix="nsjq-rs-"))
        self._server = start_pgserver(self.directory, cleanup_mode=None)
        info = self._server.get_postmaster_info()
        self.socket_dir = info.socket_dir
        self.dsn = self._server.get_uri()
        self.running = True

    def _ctl(self, args: list[str]) -> None:
        self._pg_ctl(args, pgdata=self.directory, user=self._server.system_user, timeout=60)

    def stop(self, mode: str = "fast") -> None:
        self._ctl(["-w", "-m", mode, "stop"])
        self.running = False

    def start(self) -> None:
        args = ["-w", "-o", '-h ""', "-l", str(self.directory / "log"), "start"]
        if self.socket_dir is not None:
            args[1:1] = ["-o", f"-k {self.socket_dir}"]
        self._ctl(args)
        self.running = True

    def close(self) -> None:
        import shutil

        if self.running:
            with contextlib.suppress(Exception):
                self.stop("immediate")
        with contextlib.suppress(Exception):
            self._server.global_process_id_list.get_and_remove(os.getpid())
        shutil.rmtree(self.directory, ignore_errors=True)


def function_worker(settings, execute: Callable, execute_dead: Callable | None = None):
    """A ``WorkerBase`` whose ``execute`` (and ``execute_dead``) are the given callables."""
    from nsj_queue_lib.worker_base import WorkerBase

    class FunctionWorker(WorkerBase):
        def execute(self, payload, tarefa, bd_conn):
            return execute(payload, tarefa, bd_conn)

        def execute_dead(self, payload, tarefa, bd_conn):
            if execute_dead is None:
                return super().execute_dead(payload, tarefa, bd_conn)
            return execute_dead(payload, tarefa, bd_conn)

    return FunctionWorker(settings=settings)


def start_function_worker(
    dsn: str,
    queue,
    conn,
    execute: Callable,
    execute_dead: Callable | None = None,
    wait_listening: bool = True,
    **changes: Any,
) -> InProcessWorker:
    """A ``function_worker`` on ``queue`` (``settings_for`` with ``changes``) running in a thread;
    with ``wait_listening``, once its LISTEN shows on ``conn``."""
    worker = InProcessWorker(
        function_worker(settings_for(dsn, queue.table, **changes), execute, execute_dead)
    ).start()
    if wait_listening:
        wait_for(
            lambda: listening_backends(conn, queue.name) >= 1,
            10,
            "the worker to LISTEN on its channel",
        )
    return worker


def enqueue(dsn: str, table: str, tasks: Iterable[Mapping[str, Any]]) -> list[int]:
    """Insert tasks with ``QueueClient`` in one committed transaction; their ids."""
    import psycopg

    from nsj_queue_lib.queue_client import QueueClient

    defaults = dict(
        origem="teste", destino="worker", processo="processar", chave_externa=None, payload="x"
    )
    with psycopg.connect(dsn) as conn:
        client = QueueClient(conn, table)
        ids = [client.insert_task(**{**defaults, **task}) for task in tasks]
        conn.commit()
    return ids


# Tasks ready at once, by payload: (prioridade, seconds before now). A worker claims them
# by priority, then age: E, C, B, F, A, D.
READY_TASKS = {
    "A": (50, 10),
    "B": (50, 20),
    "C": (90, 1),
    "D": (10, 30),
    "E": (90, 5),
    "F": (50, 15),
}


def ready_tasks(now: datetime.datetime) -> list[dict[str, Any]]:
    """``READY_TASKS`` as tasks to enqueue, their data_hora counted back from ``now``."""
    return [
        dict(payload=name, prioridade=prio, data_hora=now - datetime.timedelta(seconds=ago))
        for name, (prio, ago) in READY_TASKS.items()
    ]


def fetch_rows(conn, table: str, where: str = "true", params: Any = None) -> list[dict[str, Any]]:
    cur = conn.execute(f"SELECT * FROM {table} WHERE {where} ORDER BY id", params)
    names = [c.name for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
