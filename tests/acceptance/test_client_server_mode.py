"""Workers in client/server mode (issue 5) on PostgreSQL: real processes on 127.0.0.1.

Every test runs ``python -m nsj_queue_lib.server`` (``ServerProcess``) on the
test database and queue, and worker processes
(``workers/recording_worker.py``) with ``CLIENT_SERVER_MODE=true``: their
wake-ups come from the server's notify service, their task liveness locks and
maintenance locks from its lock service. The worker writes one row into
``<queue>_exec`` in the task's own transaction, so the side table counts
committed executions exactly. Tests wait on observable state (rows, the
server's log, process exits) with deadlines.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import threading
import time
from datetime import datetime
from types import SimpleNamespace

import psycopg
import pytest

from nsj_queue_lib import protocol
from nsj_queue_lib.client import AuthenticationError, LockClient
from nsj_queue_lib.runtime.liveness import service_lock_name, task_lock_name
from tests.helpers.processes import enqueue, fetch_rows, statuses, wait_for
from tests.helpers.recorder import WORKER, assert_rescued, exec_rows, insert_many, spec, started_ids
from tests.helpers.server_process import (
    TEST_TOKEN,
    ServerProcess,
    free_port,
    pg_env,
    read_until_closed,
)

# -- helpers -------------------------------------------------------------------------------


def table_oid(dsn: str, table: str) -> int:
    """The queue's identity in lock names (the table's oid), however QUEUE_TABLE is spelled."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute("SELECT %s::regclass::oid::bigint", (table,)).fetchone()[0])


def server_env(pg_dsn: str, queue, **extra) -> dict[str, str]:
    """The server's environment: the test database and queue (check-tasks poll and LISTEN relay)."""
    env = pg_env(pg_dsn)
    env.update(
        QUEUE_NAME=queue.name, QUEUE_TABLE=queue.table, CHECK_TASKS_INTERVAL="1", LOG_DEBUG="false"
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def cs_env(env, server, **overrides):
    """A worker's environment in client/server mode, pointed at ``server`` (its ports and token)."""
    return env(
        CLIENT_SERVER_MODE="true",
        SERVER_HOST="127.0.0.1",
        NOTIFY_SERVICE_PORT=server.notify_port,
        LOCK_SERVICE_PORT=server.lock_port,
        QUEUE_SERVER_TOKEN=server.token,
        TIMEOUT_SOCKET_MESSAGE="5",
        **overrides,
    )


def subscribed(server: ServerProcess, queue) -> int:
    """How many clients subscribed to the queue during the server's current run."""
    return server.log_text(since_start=True).count(f"subscribed to '{queue.name}'")


def wait_subscribed(server: ServerProcess, queue, count: int, timeout: float = 20) -> None:
    wait_for(
        lambda: subscribed(server, queue) >= count,
        timeout,
        f"{count} worker(s) to subscribe to {queue.name!r} on the server",
    )


def assert_each_key_ran_once(conn, queue, count: int) -> None:
    """Every chave_externa's chain ends in 'sucesso' and committed exactly one execution."""
    total, keys = conn.execute(
        f"SELECT count(*), count(DISTINCT chave) FROM {queue.table}_exec"
    ).fetchone()
    assert (total, keys) == (count, count)
    # The committed execution is the attempt that succeeded.
    assert (
        conn.execute(
            f"SELECT count(*) FROM {queue.table} q JOIN {queue.table}_exec e ON e.task_id = q.id "
            f"WHERE q.status = 'sucesso'"
        ).fetchone()[0]
        == count
    )


def worker_sessions(conn, queue) -> tuple[int, int, int]:
    """(sessions, of them LISTENing, of them busy) of the workers of ``queue`` in pg_stat_activity."""
    return conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE query ILIKE 'LISTEN%%'), "
        "count(*) FILTER (WHERE state <> 'idle') "
        "FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
        (f"nsj_queue_lib:{queue.name}"[:63],),
    ).fetchone()


def worker_advisory_locks(conn, queue) -> int:
    """Advisory locks held by the sessions of the workers of ``queue`` (other suites may share the database)."""
    return conn.execute(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND a.application_name = %s",
        (f"nsj_queue_lib:{queue.name}"[:63],),
    ).fetchone()[0]


def stop_all(procs, timeout: float = 20) -> list[int]:
    for proc in procs:
        proc.send(signal.SIGTERM)
    return [proc.wait(timeout) for proc in procs]


@pytest.fixture
def server_for(servers, pg_dsn):
    """``server_for(queue, **env)`` starts the socket server on the test database and queue."""

    def start(queue, token: str | None = TEST_TOKEN, **extra) -> ServerProcess:
        return servers(env=server_env(pg_dsn, queue, **extra), token=token)

    return start


# -- 1. several workers through the server -------------------------------------------------


@pytest.mark.slow
def test_three_workers_through_the_server_run_a_thousand_tasks_exactly_once_without_listen_or_advisory_locks(
    side, workers, env, server_for, pg_dsn, pg_admin, pg_autocommit
):
    queue = side
    # No trigger, no NOTIFY: the only wake-ups are the server's check-tasks poll.
    pg_admin.execute(f"ALTER TABLE {queue.table} DISABLE TRIGGER USER")
    server = server_for(queue, CHECK_TASKS_INTERVAL="0.2")
    # A dispatcher that never times out: it cannot find the tasks by itself.
    worker_env = cs_env(
        env,
        server,
        QUEUE_CONCURRENCY=3,
        QUEUE_WAIT_NOTIFY_INTERVAL=3600,
        QUEUE_RETRY_THREAD_INTERVAL=1,
    )
    procs = [workers.start(WORKER, worker_env, f"worker{i}") for i in range(3)]
    wait_subscribed(server, queue, 3)
    # The pools are open (3 connections each, plus the control connection) and quiet.
    wait_for(
        lambda: (lambda s: s[0] >= 12 and s[2] == 0)(worker_sessions(pg_autocommit, queue)),
        15,
        "the workers' database sessions to be open and idle",
    )

    insert_many(pg_dsn, queue.table, 1000, payload=spec(sleep=0.02))
    samples = busy_samples = 0
    deadline = time.monotonic() + 60
    while True:
        sessions, listening, busy = worker_sessions(pg_autocommit, queue)
        assert listening == 0, "a worker in client/server mode ran LISTEN"
        assert worker_advisory_locks(pg_autocommit, queue) == 0, (
            "a worker in client/server mode took an advisory lock"
        )
        samples += 1
        busy_samples += busy > 0
        done = statuses(pg_autocommit, queue.table)
        if done == {"sucesso": 1000}:
            break
        assert time.monotonic() < deadline, f"1,000 tasks not done within 60 s: {done}"
        time.sleep(0.02)
    assert busy_samples >= 5, "the locks were never sampled while tasks ran"

    total, distinct, pids = pg_autocommit.execute(
        f"SELECT count(*), count(DISTINCT task_id), array_agg(DISTINCT pid) FROM {queue.table}_exec"
    ).fetchone()
    assert (total, distinct) == (1000, 1000)
    assert set(pids) == {p.pid for p in procs}, "every process should have taken part"
    # The workers' liveness locks were the server's, and none outlives its task.
    with server.lock_client("observer") as observer:
        ids = [r["id"] for r in fetch_rows(pg_autocommit, queue.table)]
        assert (
            observer.held(task_lock_name(table_oid(pg_dsn, queue.table), i) for i in ids) == set()
        )
    assert server.alive
    assert stop_all(procs) == [0, 0, 0]


# -- 2. kill -9 of a worker holding a task --------------------------------------------------


@pytest.mark.slow
def test_kill_9_of_a_worker_frees_its_server_locks_at_once_and_another_worker_rescues_the_task(
    side, workers, env, server_for, long_task, pg_dsn, pg_autocommit
):
    queue = side
    server = server_for(queue, LOG_DEBUG="true")
    task, victim = long_task(cs_env(env, server), "victim", sleep=120, name="victim")
    lock = task_lock_name(table_oid(pg_dsn, queue.table), task)
    observer = server.lock_client("observer")
    assert observer.held([lock]) == {lock}

    # While the victim lives, the rescuer's retry service must leave its task alone.
    retry_unlock = f"unlock '{service_lock_name(table_oid(pg_dsn, queue.table), 'retry')}' -> True"
    runs_before = server.log_text(since_start=True).count(retry_unlock)
    rescuer = workers.start(WORKER, cs_env(env, server, QUEUE_RETRY_THREAD_INTERVAL=1), "rescuer")
    assert server.wait_for_log(retry_unlock, timeout=15, count=runs_before + 2), (
        "the rescuer's retry service did not run twice"
    )
    assert statuses(pg_autocommit, queue.table) == {"processando": 1}

    victim.kill9()
    killed = time.monotonic()
    wait_for(lambda: not observer.held([lock]), 2, "the server to release the killed worker's lock")
    assert time.monotonic() - killed < 2

    second = assert_rescued(pg_autocommit, queue, task, "victim", rescuer)
    assert (
        observer.held([lock, task_lock_name(table_oid(pg_dsn, queue.table), second["id"])]) == set()
    )
    assert rescuer.alive()
    assert stop_all([rescuer]) == [0]


# -- 3. server restart while tasks flow -----------------------------------------------------


@pytest.mark.slow
def test_workers_reconnect_after_a_server_restart_and_finish_the_work_exactly_once(
    side, workers, env, server_for, pg_dsn, pg_autocommit
):
    queue = side
    total = 400
    server = server_for(queue, CHECK_TASKS_INTERVAL="0.5")
    worker_env = cs_env(env, server, QUEUE_CONCURRENCY=2, QUEUE_RETRY_THREAD_INTERVAL=1)
    procs = [workers.start(WORKER, worker_env, f"worker{i}") for i in range(2)]
    wait_subscribed(server, queue, 2)

    insert_many(pg_dsn, queue.table, total, payload=spec(sleep=0.01))
    wait_for(
        lambda: statuses(pg_autocommit, queue.table).get("sucesso", 0) >= total // 5,
        30,
        "a fifth of the tasks to succeed",
    )
    server.restart()
    done_at_restart = statuses(pg_autocommit, queue.table).get("sucesso", 0)
    assert done_at_restart < total, "the work was over before the restart: make the tasks longer"

    wait_subscribed(server, queue, 2)  # both workers came back to the new server
    wait_for(
        lambda: (
            statuses(pg_autocommit, queue.table).get("sucesso", 0) == total
            and not {"pendente", "processando", "agendada"}
            & set(statuses(pg_autocommit, queue.table))
        ),
        60,
        f"all {total} tasks to succeed after the restart",
    )
    assert_each_key_ran_once(pg_autocommit, queue, total)
    for proc in procs:
        output = proc.output()
        assert proc.alive(), output[-3000:]
        # Each noticed the restart, backed off, and connected again (the first line is the start).
        assert "socket server connection lost" in output and "retrying in" in output, output[-3000:]
        assert output.count(f"reconnected to 127.0.0.1:{server.lock_port}") >= 2, output[-3000:]
    assert stop_all(procs) == [0, 0]


# -- 4. bad clients while the workers work ----------------------------------------------------


class Hammer:
    """Bad clients, one after another, until stopped; every reaction of the server is checked."""

    def __init__(self, server: ServerProcess, stop: threading.Event):
        self.server = server
        self.stop = stop
        self.counts: dict[str, int] = {}
        self.problems: list[str] = []

    def _raw(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.server.lock_port), timeout=5)

    def _expect_closed(
        self, kind: str, sock: socket.socket, code: str | None, timeout: float = 5
    ) -> None:
        """The server closes the connection within ``timeout``, saying ``code`` (None: a reset may eat it)."""
        frames, closed = read_until_closed(sock, timeout)
        sock.close()
        if not closed:
            self.problems.append(f"{kind}: the server kept the connection open")
        elif code is not None and code not in [f.get("error") for f in frames]:
            self.problems.append(f"{kind}: expected error {code!r}, got {frames!r}")

    def no_token(self) -> None:
        try:
            LockClient("127.0.0.1", self.server.lock_port, None, "bad-no-token", 5).close()
            self.problems.append("no token: accepted")
        except AuthenticationError:
            pass

    def wrong_token(self) -> None:
        try:
            LockClient(
                "127.0.0.1", self.server.lock_port, "wrong-" + TEST_TOKEN, "bad-wrong-token", 5
            ).close()
            self.problems.append("wrong token: accepted")
        except AuthenticationError:
            pass

    def garbage(self) -> None:
        sock = self._raw()
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(200))
        self._expect_closed("garbage", sock, "frame_too_large")

    def garbage_json(self) -> None:
        sock = self._raw()
        sock.sendall(struct.pack(">I", 9) + b"\xff\xfenot js")
        sock.sendall(b"\x00")  # the 9th byte
        self._expect_closed("garbage frame", sock, "protocol_error")

    def ten_megabytes(self) -> None:
        sock = self._raw()
        size = 10 * 1024 * 1024
        try:
            sock.sendall(struct.pack(">I", size))
            chunk = b"x" * 65536
            for _ in range(size // len(chunk)):
                sock.sendall(chunk)
        except OSError:
            pass  # closed by the server after the 4 length bytes: the body is never read
        else:
            self.problems.append("10 MB frame: the server took the whole body")
        # The error frame may be lost to the reset our unread body causes; the server log shows it.
        self._expect_closed("10 MB frame", sock, None)

    def unauthenticated_halt(self) -> None:
        sock = self._raw()
        sock.sendall(protocol.encode({"op": "halt", "id": 1}))
        self._expect_closed("unauthenticated halt", sock, "unauthenticated")

    def run(self) -> None:
        kinds = [
            self.no_token,
            self.wrong_token,
            self.garbage,
            self.garbage_json,
            self.ten_megabytes,
            self.unauthenticated_halt,
        ]
        try:
            while not self.stop.is_set():
                for kind in kinds:
                    kind()
                    self.counts[kind.__name__] = self.counts.get(kind.__name__, 0) + 1
        except Exception as exc:  # reported by the test
            self.problems.append(f"hammer crashed: {exc!r}")

    def silent(self) -> None:
        """Clients that connect and say nothing: the server drops each after TIMEOUT_SOCKET_MESSAGE."""
        try:
            while not self.stop.is_set():
                socks = [self._raw() for _ in range(3)]
                for sock in socks:
                    self._expect_closed("silent client", sock, "timeout", timeout=5)
                self.counts["silent"] = self.counts.get("silent", 0) + len(socks)
        except Exception as exc:  # reported by the test
            self.problems.append(f"silent hammer crashed: {exc!r}")


@pytest.mark.slow
def test_bad_clients_hammering_the_server_do_not_disturb_the_workers(
    side, workers, env, server_for, pg_dsn, pg_autocommit
):
    queue = side
    total = 300
    server = server_for(queue)  # TIMEOUT_SOCKET_MESSAGE=1 on the server
    worker_env = cs_env(env, server, QUEUE_CONCURRENCY=2)
    procs = [workers.start(WORKER, worker_env, f"worker{i}") for i in range(2)]
    wait_subscribed(server, queue, 2)

    stop = threading.Event()
    hammer = Hammer(server, stop)
    threads = [threading.Thread(target=hammer.run, daemon=True) for _ in range(2)]
    threads.append(threading.Thread(target=hammer.silent, daemon=True))
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: len(hammer.counts) >= 3, 10, "the bad clients to start")
        # Enqueued in three commits while the bad clients hammer the server.
        for batch in range(3):
            insert_many(
                pg_dsn, queue.table, total // 3, payload=spec(sleep=0.02), prefix=f"b{batch}-"
            )
        wait_for(
            lambda: statuses(pg_autocommit, queue.table) == {"sucesso": total},
            60,
            f"{total} tasks to succeed under attack",
        )
        # At least one full round of every kind of bad client while the work ran.
        wait_for(
            lambda: (
                min(
                    hammer.counts.get(k, 0)
                    for k in (
                        "no_token",
                        "wrong_token",
                        "garbage",
                        "garbage_json",
                        "ten_megabytes",
                        "unauthenticated_halt",
                        "silent",
                    )
                )
                >= 1
            ),
            20,
            f"every kind of bad client to have run (counts: {hammer.counts})",
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
    assert hammer.problems == []
    assert_each_key_ran_once(pg_autocommit, queue, total)

    assert server.alive
    with server.lock_client("after-the-attack") as good:
        good.ping()
    log = server.log_text()
    for evidence in (
        "authentication failed (no token)",
        "authentication failed (wrong token)",
        "frame_too_large",
        "protocol_error",
        "timeout: no hello",
        "halt before hello refused",
    ):
        assert evidence in log, evidence
    assert "stopping" not in log
    # The good workers never lost their connections to the server: one connection each, at start.
    for proc in procs:
        output = proc.output()
        assert "connection lost" not in output and output.count("reconnected to") == 1, output[
            -3000:
        ]
    assert stop_all(procs) == [0, 0]


# -- 5. no server yet ---------------------------------------------------------------------------


ATTEMPT = re.compile(
    r"^(\S+ \S+) \w+ nsj_queue_lib\.client .*:locks: reconnect attempt (\d+) failed", re.M
)


def attempts(output: str) -> dict[int, datetime]:
    return {
        int(n): datetime.strptime(ts, "%Y-%m-%d %H:%M:%S,%f") for ts, n in ATTEMPT.findall(output)
    }


@pytest.mark.slow
def test_a_worker_started_before_the_server_backs_off_quietly_and_works_once_the_server_is_up(
    side, workers, env, servers, pg_dsn, pg_autocommit
):
    queue = side
    notify_port, lock_port = free_port(), free_port()
    not_yet = SimpleNamespace(
        notify_port=notify_port, lock_port=lock_port, token=TEST_TOKEN
    )  # nothing listens
    worker = workers.start(WORKER, cs_env(env, not_yet, LOG_DEBUG="true"), "early")

    first = wait_for(
        lambda: attempts(worker.output()).get(1), 15, "the first failed connection attempt"
    )
    cpu_first = worker.cpu_seconds()
    wait_for(lambda: attempts(worker.output()).get(6), 15, "the sixth failed connection attempt")
    cpu_sixth = worker.cpu_seconds()
    seen = attempts(worker.output())
    gaps = [(seen[n + 1] - seen[n]).total_seconds() for n in range(1, 6)]
    assert worker.alive()
    # Exponential back-off: 0.1 s doubling (with jitter), not a fixed pace and not a spin.
    assert gaps[-1] >= 4 * gaps[0], gaps
    assert (seen[6] - first).total_seconds() >= 1.0, gaps
    assert cpu_sixth - cpu_first < 0.25, (
        f"{cpu_sixth - cpu_first:.2f} CPU s while waiting for the server"
    )

    enqueue(pg_dsn, queue.table, [dict(payload="x", chave_externa=f"early{i}") for i in range(5)])
    assert statuses(pg_autocommit, queue.table) == {"pendente": 5}
    servers(env=server_env(pg_dsn, queue), notify_port=notify_port, lock_port=lock_port)
    wait_for(
        lambda: statuses(pg_autocommit, queue.table) == {"sucesso": 5},
        20,
        "the worker to run the tasks once the server is up",
    )
    assert_each_key_ran_once(pg_autocommit, queue, 5)
    assert stop_all([worker]) == [0]


# -- regressions: a server restart and the spelling of QUEUE_TABLE ------------------------------------


def retry_runs(server: ServerProcess, queue_oid: int) -> int:
    """Completed runs of a retry service on the server's current run (needs LOG_DEBUG on the server)."""
    return server.log_text(since_start=True).count(
        f"unlock '{service_lock_name(queue_oid, 'retry')}' -> True"
    )


def assert_not_rescued(
    server, queue, task: int, runner, dsn: str, conn, what: str, timeout: float = 10
) -> None:
    """Once the retry service ran twice (``what``), ``runner`` is still inside its handler:
    its task must not be rescued and started again."""
    wait_for(lambda: retry_runs(server, table_oid(dsn, queue.table)) >= 2, timeout, what)
    assert runner.alive()
    assert statuses(conn, queue.table) == {"processando": 1}
    assert started_ids(conn, queue) == [task]


def assert_runs_once(conn, queue, task: int, key: str, runner, timeout: float = 20) -> None:
    """``task`` succeeds with one committed execution, ``runner``'s."""
    wait_for(lambda: statuses(conn, queue.table) == {"sucesso": 1}, timeout, "the task to succeed")
    assert exec_rows(conn, queue) == [(task, key, runner.pid)]


@pytest.mark.slow
def test_a_task_running_across_a_server_restart_keeps_its_liveness_lock_and_is_not_rescued(
    side, workers, env, server_for, long_task, pg_dsn, pg_autocommit, tmp_path
):
    queue = side
    server = server_for(queue, LOG_DEBUG="true")
    # It runs until the checks below are done (the file), at most 120 s: the reconnections
    # after the restart and two retry runs took over 12 s on a loaded machine.
    done = tmp_path / "done"
    task, runner = long_task(
        cs_env(env, server, QUEUE_CONCURRENCY=1), "long", sleep=120, name="runner", until=str(done)
    )
    watcher = workers.start(WORKER, cs_env(env, server, QUEUE_RETRY_THREAD_INTERVAL=1), "watcher")
    wait_subscribed(server, queue, 2)

    server.restart()
    what = "two retry runs on the restarted server"
    assert_not_rescued(server, queue, task, runner, pg_dsn, pg_autocommit, what, timeout=25)
    with server.lock_client("observer") as observer:
        assert observer.held([task_lock_name(table_oid(pg_dsn, queue.table), task)]) == {
            task_lock_name(table_oid(pg_dsn, queue.table), task)
        }
    assert runner.alive() and statuses(pg_autocommit, queue.table) == {"processando": 1}
    done.touch()
    assert_runs_once(pg_autocommit, queue, task, "long", runner)
    assert stop_all([runner, watcher]) == [0, 0]


@pytest.mark.slow
def test_workers_spelling_the_queue_table_differently_still_see_each_others_task_locks(
    side, workers, env, server_for, long_task, pg_dsn, pg_autocommit, tmp_path
):
    queue = side
    server = server_for(queue, LOG_DEBUG="true")
    # QUEUE_TABLE=public.<name>; the task runs until the watcher's checks are done.
    done = tmp_path / "done"
    task, runner = long_task(cs_env(env, server), "long", sleep=60, name="runner", until=str(done))
    # The same table, as the search_path finds it (DB mode keys its locks on the table's oid).
    watcher = workers.start(
        WORKER,
        cs_env(env, server, QUEUE_TABLE=queue.name, QUEUE_RETRY_THREAD_INTERVAL=1),
        "watcher",
    )
    assert_not_rescued(
        server,
        queue,
        task,
        runner,
        pg_dsn,
        pg_autocommit,
        "two runs of the watcher's retry service",
    )
    done.touch()
    assert_runs_once(pg_autocommit, queue, task, "long", runner)
    assert stop_all([runner, watcher]) == [0, 0]
