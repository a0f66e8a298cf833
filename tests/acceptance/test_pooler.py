"""Real worker processes behind a real PgBouncer, in session and in transaction mode.

The suite starts its own PgBouncer (``tests/helpers/pgbouncer.py``): in
transaction mode with fewer server connections than the workers have clients,
once with ``DISCARD ALL`` between transactions (``server_reset_query_always =
1``) and once without (the default), so every piece of session state a worker
kept would be lost, or left behind on a server connection for another client.
What must hold in every mode (docs/how-to/poolers.md): new tasks wake a
worker (in transaction mode by polling, with a warning), every task runs
exactly once, a killed worker's task is rescued, and no advisory lock is ever
held by a server connection outside a transaction (one that may serve another
client next).
"""

from __future__ import annotations

import json
import signal
import time

import psycopg
import pytest

from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.runtime.purge import PurgeService
from nsj_queue_lib.runtime.renotify import RenotifyService
from nsj_queue_lib.runtime.retry import RetryService
from nsj_queue_lib.runtime.service import service_lock_key
from nsj_queue_lib.runtime.worker_runtime import EXIT_CONFIG_ERROR
from tests.helpers.databases import ci_enabled
from tests.helpers.endpoints import free_port, get_json
from tests.helpers.pgbouncer import PgBouncer, PgBouncerUnavailable
from tests.helpers.processes import (
    enqueue,
    fetch_rows,
    listening_backends,
    settings_for,
    statuses,
    wait_for,
    worker_env,
)
from tests.helpers.recorder import WORKER, assert_rescued, drain_exactly_once, exec_rows, spec
from tests.helpers.services import make_service

# One worker runs the module: each pooler mode's PgBouncer starts once (a module fixture).
pytestmark = pytest.mark.xdist_group("pooler")

DEAF = "deaf LISTEN detected"
POLL_INTERVAL = 0.5
SERVICES = ("retry", "renotify", "purge")

# Advisory locks of a queue (task liveness locks: classid = the table's oid) or of
# its services (one bigint key), with their holder's state.
ADVISORY_HOLDERS = """
SELECT l.classid::bigint, l.objid::bigint, l.objsubid, a.state, l.pid
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND ((l.objsubid = 2 AND l.classid = to_regclass(%(table)s)::oid)
       OR (l.objsubid = 1 AND (l.classid::bigint << 32) | l.objid::bigint = ANY(%(keys)s)))
"""


@pytest.fixture(scope="module", params=["session", "transaction", "transaction-noreset"])
def pooler(request, pg_dsn):
    mode, _, noreset = request.param.partition("-")
    try:
        bouncer = PgBouncer(pg_dsn, mode, reset_always=not noreset)
    except PgBouncerUnavailable as exc:
        if ci_enabled():
            pytest.fail(f"{exc} (CI=true: a missing pooler fails the run)", pytrace=False)
        pytest.skip(str(exc))
    yield bouncer
    bouncer.close()


@pytest.fixture
def pooled_env(pooler, side):
    def make(**overrides):
        return worker_env(pooler.dsn, side.table, QUEUE_POLL_INTERVAL=POLL_INTERVAL, **overrides)

    return make


def service_keys(table: str) -> list[int]:
    # pg_locks shows a bigint key as two oids; ADVISORY_HOLDERS puts them together again
    # (the shift wraps around as the signed key does).
    return [service_lock_key(table, name) for name in SERVICES]


def lock_holders(conn, table: str) -> list[tuple]:
    rows = conn.execute(ADVISORY_HOLDERS, {"table": table, "keys": service_keys(table)})
    return rows.fetchall()


def idle_holders(conn, table: str, holders: list[tuple] | None = None) -> list[tuple]:
    """Advisory locks held by a backend outside any transaction: left behind.

    pg_locks and pg_stat_activity are not read at one instant: a lock released
    by a commit can show with its holder already idle. A lock still held by
    the same idle backend a moment later is no such race.
    """
    suspects = [row for row in holders or lock_holders(conn, table) if row[3] == "idle"]
    if not suspects:
        return []
    time.sleep(0.05)
    return [row for row in lock_holders(conn, table) if row in suspects]


def started(procs, pooler, conn, queue) -> None:
    """Each worker LISTENs (session mode) or has found its LISTEN deaf (transaction mode)."""
    if pooler.mode == "transaction":
        for proc in procs:
            wait_for(lambda p=proc: DEAF in p.output(), 15, f"{proc.name} to report {DEAF!r}")
    else:
        wait_for(
            lambda: listening_backends(conn, queue.name) == len(procs), 15, "the workers to LISTEN"
        )


@pytest.mark.slow
def test_a_new_task_wakes_the_worker_and_readyz_tells_how(
    pooler, side, workers, pooled_env, pg_dsn, pg_autocommit
):
    port = free_port()
    # QUEUE_WAIT_NOTIFY_INTERVAL is long: only LISTEN or the fallback poll can be in time.
    worker = workers.start(
        WORKER, pooled_env(QUEUE_WAIT_NOTIFY_INTERVAL=60, QUEUE_METRICS_PORT=port, LOG_DEBUG=1)
    )
    expected = {"mode": "poll", "reason": DEAF} if pooler.mode == "transaction" else None

    def wakeups():
        status, document = get_json(port, "/readyz")
        return document["wakeups"] if status == 200 and document else None

    state = wait_for(wakeups, 15, "/readyz to answer 200")
    if expected is None:
        wait_for(lambda: wakeups() == {"mode": "listen"}, 15, "LISTEN to be checked")
    else:
        wait_for(lambda: wakeups() == expected, 15, "polling to be reported")
    state = wakeups()
    enqueued = time.monotonic()
    enqueue(pg_dsn, side.table, [dict(payload="{}", chave_externa="late")])
    wait_for(
        lambda: statuses(pg_autocommit, side.table) == {"sucesso": 1},
        POLL_INTERVAL + 2,
        "the task enqueued after the start to run",
    )
    assert time.monotonic() - enqueued < POLL_INTERVAL + 2
    warned = [line for line in worker.output().splitlines() if DEAF in line]
    if pooler.mode == "transaction":
        assert state == expected
        assert warned and "WARNING" in warned[0] and "transaction mode" in warned[0]
        assert "QUEUE_WAKEUP=poll" in warned[0] and "CLIENT_SERVER_MODE" in warned[0]
    else:
        assert state == {"mode": "listen"} and not warned
    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0


@pytest.mark.slow
def test_two_workers_run_two_thousand_tasks_exactly_once(
    pooler, side, workers, pooled_env, pg_dsn, pg_autocommit
):
    procs = [workers.start(WORKER, pooled_env(QUEUE_CONCURRENCY=2), f"w{i}") for i in range(2)]
    started(procs, pooler, pg_autocommit, side)
    # Polling every 0.5 s behind a transaction-mode pooler, one process could drain 2,000
    # no-op tasks in groups before the other's first poll: 2 ms each keep the drain longer
    # than a poll interval, so that both take part.
    pids = drain_exactly_once(pg_dsn, pg_autocommit, side, 4, 500, 40, spec(sleep=0.002))
    assert pids == {p.pid for p in procs}, "both processes should have taken part"
    assert idle_holders(pg_autocommit, side.table) == []
    for proc in procs:
        proc.send(signal.SIGTERM)
    assert [proc.wait(15) for proc in procs] == [0, 0]
    assert lock_holders(pg_autocommit, side.table) == []


@pytest.mark.slow
def test_a_killed_workers_task_is_rescued(side, workers, pooled_env, long_task, pg_autocommit):
    task, victim = long_task(pooled_env(), "victim", sleep=120, name="victim")
    victim.kill9()
    rescuer = workers.start(WORKER, pooled_env(QUEUE_RETRY_THREAD_INTERVAL=0.5), "rescuer")
    assert_rescued(pg_autocommit, side, task, "victim", rescuer)
    assert idle_holders(pg_autocommit, side.table) == []
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait(15) == 0


def insert_row(conn, table: str, status: str, **columns) -> int:
    values = dict(origem="teste", destino="worker", processo="p", payload="{}", status=status)
    values.update(columns)
    names, marks = ", ".join(values), ", ".join(["%s"] * len(values))
    return conn.execute(
        f"INSERT INTO {table} ({names}) VALUES ({marks}) RETURNING id", list(values.values())
    ).fetchone()[0]


def watch_locks(conn, table: str, seconds: float) -> None:
    """For ``seconds``: no advisory lock of the queue is ever held outside a transaction."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        holders = lock_holders(conn, table)
        assert idle_holders(conn, table, holders) == [], holders
        time.sleep(0.005)


@pytest.mark.slow
def test_services_keep_running_and_never_leave_a_lock_behind(
    pooler, side, workers, pooled_env, pg_dsn, pg_autocommit
):
    """Retry, renotify and purge every 0.2 s for several periods; pg_locks sampled meanwhile."""
    table = side.table
    # A stale 'pendente' row this test keeps row-locked: renotify wakes the workers at every run.
    stale = insert_row(pg_autocommit, table, "pendente", data_hora="2000-01-01")
    worker = workers.start(
        WORKER,
        pooled_env(
            QUEUE_RETRY_THREAD_INTERVAL=0.2,
            QUEUE_NOTIFY_THREAD_INTERVAL=0.2,
            QUEUE_PURGE_THREAD_INTERVAL=0.2,
            QUEUE_PURGE_MAX_AGE=1,
        ),
    )
    with psycopg.connect(pg_dsn) as row_holder:
        row_holder.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", (stale,))
        for round_ in range(3):
            orphan = insert_row(pg_autocommit, table, "processando", chave_externa=f"o{round_}")
            old = insert_row(pg_autocommit, table, "sucesso", data_hora="2000-01-01")

            def settled(orphan=orphan, old=old):
                watch_locks(pg_autocommit, table, 0.05)
                rows = {r["id"]: r for r in fetch_rows(pg_autocommit, table)}
                return rows[orphan]["status"] == "falha_processando" and old not in rows

            wait_for(settled, 10, f"round {round_}: the orphan rescued and the old row purged")
        watch_locks(pg_autocommit, table, 0.5)
    log = worker.output()
    assert log.count("rescued an abandoned attempt") == 3
    assert log.count("purged 1 row(s)") == 3
    assert log.count("woke the workers") >= 3
    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert lock_holders(pg_autocommit, table) == []


def test_nsjq_status_says_how_workers_are_woken(pooler, side, capsys, monkeypatch):
    """nsjq cannot ask the workers: it tries LISTEN itself through the same DSN."""
    from nsj_queue_lib.cli import main

    for name in ("QUEUE_WAKEUP", "CLIENT_SERVER_MODE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--dsn", pooler.dsn, "--table", side.table, "status"]) == 0
    out = capsys.readouterr().out
    if pooler.mode == "transaction":
        assert f"wake-ups: poll ({DEAF})" in out
    else:
        assert "wake-ups: listen\n" in out
    monkeypatch.setenv("QUEUE_WAKEUP", "poll")
    assert main(["--dsn", pooler.dsn, "--table", side.table, "status", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["wakeups"] == {"mode": "poll", "reason": "QUEUE_WAKEUP=poll"}


def test_asynchronous_commits_need_a_session_pool(
    pooler, side, workers, pooled_env, pg_dsn, pg_autocommit
):
    """QUEUE_SYNCHRONOUS_COMMIT=false is a session setting: refused at start without sessions."""
    worker = workers.start(WORKER, pooled_env(QUEUE_SYNCHRONOUS_COMMIT="false"))
    if pooler.mode == "transaction":
        assert worker.wait(15) == EXIT_CONFIG_ERROR
        assert "QUEUE_SYNCHRONOUS_COMMIT: false needs a session" in worker.output()
        return
    enqueue(pg_dsn, side.table, [dict(payload="{}")])
    wait_for(lambda: statuses(pg_autocommit, side.table) == {"sucesso": 1}, 30, "the task to run")
    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0


@pytest.mark.parametrize("service_class", [RetryService, RenotifyService, PurgeService])
def test_a_services_lock_is_held_for_its_whole_run(pooler, side, pg_autocommit, service_class):
    """Through the pooler, between two of the run's own commits: the lock is still held, by a
    session inside a transaction (a pooler's DISCARD ALL would have dropped a session lock)."""
    service = make_service(service_class, settings_for(pooler.dsn, side.table))
    key = service.lock.key
    during = []

    def work(conn):
        conn.execute("SELECT 1")
        conn.commit()  # the run's connection goes back to the pool here
        during.extend(h for h in lock_holders(pg_autocommit, side.table) if h[2] == 1)
        return 0

    service.work = work
    assert service.run_once() == 0
    signed = [(((c << 32) | o) - (2**64 if c >= 2**31 else 0), st) for c, o, _, st, _ in during]
    assert signed == [(key, "idle in transaction")]
    assert lock_holders(pg_autocommit, side.table) == []


@pytest.mark.slow
def test_a_task_longer_than_the_grace_period_is_released(
    pooler, side, workers, pooled_env, long_task, pg_autocommit, pg_admin
):
    """Behind a pooler the connection's backend pid is the pooler's, not a server process:
    the release must end the task's server session all the same, and no other."""
    bystander = psycopg.connect(pooler.dsn.replace(f"port={pooler.port}", "port=5432"))
    bystander.execute("SELECT 1")
    task, worker = long_task(pooled_env(QUEUE_GRACE_PERIOD=0.5), "long", sleep=120, name="w")
    worker.send(signal.SIGTERM)
    assert worker.wait(10) == 0
    first, retry = fetch_rows(pg_autocommit, side.table)
    assert (first["id"], first["status"], retry["id_anterior"]) == (
        task,
        "falha_processando",
        task,
    )
    assert exec_rows(pg_autocommit, side) == []  # the interrupted attempt's write rolled back
    wait_for(lambda: lock_holders(pg_autocommit, side.table) == [], 5, "the task's lock to go")
    assert bystander.execute("SELECT 1").fetchone() == (1,)  # no other session was ended
    bystander.close()


def in_transaction(conn, pid: int) -> bool:
    row = conn.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] in ("active", "idle in transaction")


@pytest.mark.parametrize("through", ["pooler", "direct"])
def test_terminating_a_task_session_ends_its_server_session_only(
    through, pooler, pg_dsn, pg_autocommit
):
    """What the grace-period release does to a task still running (terminate_session)."""
    dsn = pooler.dsn if through == "pooler" else pg_dsn
    driver = make_driver(settings_for(dsn, "public.unused"))
    bystander = psycopg.connect(pg_dsn, autocommit=True)
    victim = psycopg.connect(dsn, autocommit=True)
    with psycopg.connect(dsn, autocommit=True) as admin:
        victim.execute("BEGIN")
        server_pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
        bystander.execute("BEGIN")
        driver.terminate_session(admin, victim)
        wait_for(lambda: not in_transaction(pg_autocommit, server_pid), 5, "its session to end")
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        assert bystander.execute("SELECT 1").fetchone() == (1,)
    bystander.close()
    victim.close()
