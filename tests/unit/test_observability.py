"""The parts of QUEUE_METRICS_PORT that need no database: health verdicts over the real HTTP
server, the Prometheus observer, the depth sampler's leadership, ``nsjq health``, and a worker
without prometheus_client.
"""

from __future__ import annotations

import datetime
import json
import statistics
import threading

import pytest

from nsj_queue_lib import current_task
from nsj_queue_lib.cli.app import main as nsjq
from nsj_queue_lib.fleet.pause import Pause
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability.depth import DepthSampler, DepthSnapshot
from nsj_queue_lib.observability.endpoint_server import EndpointServer, EndpointServerError
from nsj_queue_lib.observability.endpoints import MISSING_CLIENT, _json
from nsj_queue_lib.observability.health import Health
from nsj_queue_lib.observability.measured import Contact, MeasuredListener, timed_handler
from nsj_queue_lib.observability.prometheus import PrometheusObserver, seconds_waited
from tests.helpers.endpoints import free_port, get, get_json
from tests.helpers.processes import clean_env, run_python

UTC = datetime.timezone.utc


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def task(processo: str = "p", data_hora=None) -> TaskRecord:
    return TaskRecord.from_row(
        {"id": 1, "tentativa": 1, "dead": False, "payload": "x", "processo": processo,
         "data_hora": data_hora}
    )  # fmt: skip


@pytest.fixture
def serve():
    """``serve(health)``: a real endpoint server for ``health``; its port."""
    servers = []

    def start(health: Health) -> int:
        port = free_port()
        server = EndpointServer(
            port,
            {
                "/healthz": lambda accept: _json(health.liveness()),
                "/readyz": lambda accept: _json(health.readiness()),
            },
            host="127.0.0.1",
        )
        server.start()
        servers.append(server)
        return port

    yield start
    for server in servers:
        server.close()


# -- health -------------------------------------------------------------------------------


def test_healthz_is_fast_and_names_a_dead_supervised_thread(serve):
    stop = threading.Event()
    health = Health(stop, Contact(), stale_after=60)
    port = serve(health)
    assert get_json(port, "/healthz") == (200, {"status": "starting"})
    done = threading.Event()
    alive = threading.Thread(target=done.wait, name="nsj-dispatcher", daemon=True)
    dies = threading.Thread(target=lambda: None, name="nsj-retry", daemon=True)
    for thread in (alive, dies):
        thread.start()
    dies.join()
    health.watch([alive], lambda: [])
    assert get_json(port, "/healthz") == (200, {"status": "ok"})
    assert statistics.median(get(port, "/healthz")[2] for _ in range(20)) < 0.02
    health.watch([alive, dies], lambda: [])
    assert get_json(port, "/healthz") == (
        503,
        {"status": "unhealthy", "dead_threads": ["nsj-retry"]},
    )
    health.watch([alive], lambda: [dies])  # an executor thread, as the executor reports it
    assert get_json(port, "/healthz")[0] == 503
    stop.set()  # threads end when the worker stops: that is no failure
    assert get_json(port, "/healthz") == (200, {"status": "stopping"})
    done.set()
    assert get(port, "/nothing")[0] == 404


def test_readyz_needs_a_connection_and_a_recent_round_trip(serve):
    clock, stop = Clock(), threading.Event()
    contact = Contact(clock)
    port = serve(Health(stop, contact, stale_after=40))
    status, answer = get_json(port, "/readyz")
    assert status == 503 and "not connected" in answer["reason"]
    contact.opened()
    clock.now += 39
    assert get_json(port, "/readyz") == (200, {"status": "ready", "seconds_since_round_trip": 39})
    clock.now += 2
    status, answer = get_json(port, "/readyz")
    assert status == 503 and "for more than 40 s" in answer["reason"]
    contact.ok()
    assert get_json(port, "/readyz")[0] == 200
    contact.closed()
    assert get_json(port, "/readyz")[0] == 503
    contact.opened()
    stop.set()
    assert get_json(port, "/readyz") == (503, {"status": "stopping"})


def test_readyz_says_how_the_worker_is_woken_and_polling_keeps_it_ready(serve):
    clock, stop = Clock(), threading.Event()
    contact = Contact(clock)
    health = Health(stop, contact, stale_after=40)
    state = {"mode": "listen"}
    health.wakeups = lambda: dict(state)
    port = serve(health)
    status, answer = get_json(port, "/readyz")
    assert status == 503 and answer["wakeups"] == {"mode": "listen"}
    contact.opened()
    state.update(mode="poll", reason="deaf LISTEN detected")
    assert get_json(port, "/readyz") == (
        200,
        {
            "status": "ready",
            "seconds_since_round_trip": 0,
            "wakeups": {"mode": "poll", "reason": "deaf LISTEN detected"},
        },
    )
    stop.set()
    assert get_json(port, "/readyz") == (503, {"status": "stopping"})


def test_a_taken_port_is_a_clear_error():
    port = free_port()
    first = EndpointServer(port, {}, host="127.0.0.1")
    first.start()
    try:
        with pytest.raises(EndpointServerError, match=f"QUEUE_METRICS_PORT: .* port {port}"):
            EndpointServer(port, {}, host="127.0.0.1").start()
    finally:
        first.close()


class FakeListener:
    def __init__(self, payloads):
        self.payloads = payloads
        self.opened = False

    def open(self):
        self.opened = True

    def close(self):
        self.opened = False

    def wait(self, timeout, interrupt_fd):
        return self.payloads


@pytest.mark.parametrize(
    "payloads, notifications, counted",
    [
        ([""], True, 1),
        (["scheduled"], True, 0),
        (["HALT"], True, 0),
        ([""], False, 0),
        ([], True, 0),
    ],
)
def test_the_measured_listener_counts_notifications_of_ready_tasks_only(
    payloads, notifications, counted
):
    observer, clock = PrometheusObserver("q"), Clock()
    contact = Contact(clock)
    listener = MeasuredListener(FakeListener(payloads), contact, observer, notifications)
    listener.open()
    assert contact.connected and contact.seconds_since_ok() == 0
    clock.now += 5
    assert listener.wait(1, -1) == payloads
    assert contact.seconds_since_ok() == 0
    assert (observer._notified_at is not None) == bool(counted)
    listener.close()
    assert not contact.connected


# -- the Prometheus observer -------------------------------------------------------------


def value(observer: PrometheusObserver, name: str, **labels: str) -> float | None:
    return observer.registry.get_sample_value(name, {"queue": "q", **labels})


def test_outcomes_are_label_values_the_caller_chooses():
    observer = PrometheusObserver("q")
    for outcome in ("sucesso", "sucesso", "falha", "dead", "rescued", "cancelada"):
        observer.task_finished(task("envio"), outcome)
    counted = {
        outcome: value(observer, "nsjq_tasks_finished_total", processo="envio", outcome=outcome)
        for outcome in ("sucesso", "falha", "dead", "rescued", "cancelada")
    }
    assert counted == {"sucesso": 2, "falha": 1, "dead": 1, "rescued": 1, "cancelada": 1}


def test_queue_wait_and_notification_to_claim():
    observer = PrometheusObserver("q")
    due = datetime.datetime.now(UTC) - datetime.timedelta(seconds=3)
    observer.task_claimed(task(data_hora=due))
    assert 3 <= value(observer, "nsjq_queue_wait_seconds_sum", processo="p") < 10
    assert value(observer, "nsjq_notification_to_claim_seconds_count") == 0  # none pending
    observer.notified()
    observer.claim_round_trip(0.001, claimed=False)  # another worker took the notified task
    observer.task_claimed(task())
    assert value(observer, "nsjq_notification_to_claim_seconds_count") == 0
    observer.notified()
    observer.notified()  # the first one counts
    observer.task_claimed(task())
    assert value(observer, "nsjq_notification_to_claim_seconds_count") == 1
    assert value(observer, "nsjq_claim_duration_seconds_count", result="empty") == 1


@pytest.mark.parametrize(
    "due, expected",
    [
        (datetime.datetime(2024, 1, 1, 11, 59, 58), 2.0),  # naive: UTC, as worker sessions read
        (datetime.datetime(2024, 1, 1, 9, 59, 58, tzinfo=datetime.timezone(-datetime.timedelta(hours=2))), 2.0),
        (datetime.datetime(2024, 1, 1, 12, 0, 1, tzinfo=UTC), 0.0),  # clocks differ: never negative
        (None, None),
    ],
)  # fmt: skip
def test_seconds_waited(due, expected):
    assert seconds_waited(due, datetime.datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)) == expected


def test_the_handler_is_timed_whether_it_returns_or_raises():
    observer = PrometheusObserver("q")

    def handler(row, conn):
        if row["payload"] == "bad":
            raise RuntimeError("bad")
        return "ok"

    timed = timed_handler(handler, observer)
    assert timed({"processo": "p", "payload": "x"}, None) == "ok"
    with pytest.raises(RuntimeError):
        timed({"processo": "p", "payload": "bad"}, None)
    assert value(observer, "nsjq_handler_duration_seconds_count", processo="p") == 2


def test_a_process_task_is_timed_by_kind_and_other_tasks_cost_no_more():
    """The kind comes from the context (process/running.py sets it while the handler runs);
    a task of no process, or one that never reached its process, is not a process's."""
    from nsj_queue_lib.context import TaskContext, running

    observer = PrometheusObserver("q")
    due = datetime.datetime.now(UTC) - datetime.timedelta(seconds=2)

    def handler(row, conn):
        context = current_task()
        context.process_kind = row.get("kind")
        return "ok"

    timed = timed_handler(handler, observer)
    rows = [
        {"processo": "p", "lock_key": "process:a", "kind": "timer", "data_hora": due},
        {"processo": "p", "lock_key": "process:a", "kind": None, "data_hora": due},  # dead letter
        {"processo": "p", "lock_key": "k", "kind": "call", "data_hora": due},  # no process
        {"processo": "p", "kind": "call", "data_hora": due},
    ]
    for row in rows:
        with running(TaskContext(1)):
            assert timed(row, None) == "ok"
    assert value(observer, "nsjq_handler_duration_seconds_count", processo="p") == 4
    assert (
        value(observer, "nsjq_process_task_duration_seconds_count", processo="p", kind="timer") == 1
    )
    assert 2 <= value(observer, "nsjq_process_task_delay_seconds_sum", kind="timer") < 10
    assert value(observer, "nsjq_process_task_delay_seconds_count", kind="call") is None


def test_gauges_are_read_at_each_scrape_and_the_depth_only_where_sampled():
    observer, clock = PrometheusObserver("q"), Clock()
    state = {"running": 2, "stats": {"pool_max": 5, "pool_size": 4, "pool_available": 1}}
    depth = DepthSnapshot(interval=10, clock=clock)
    observer.watch(lambda: state["running"], lambda: 3, 4, lambda: state["stats"], depth)
    assert value(observer, "nsjq_running_tasks") == 2
    assert value(observer, "nsjq_pool_connections_in_use") == 3
    assert value(observer, "nsjq_pool_connections_max") == 5
    assert value(observer, "nsjq_busy_executors") == 3 and value(observer, "nsjq_executors") == 4
    state["running"] = 0
    assert value(observer, "nsjq_running_tasks") == 0
    assert value(observer, "nsjq_queue_depth_sampled_timestamp_seconds") is None
    depth.publish(
        [{"processo": "a", "status": "pendente", "tasks": 7, "oldest_ready_seconds": 12.5}]
    )
    assert value(observer, "nsjq_queue_tasks", processo="a", status="pendente") == 7
    assert value(observer, "nsjq_queue_oldest_ready_seconds", processo="a") == 12.5
    assert value(observer, "nsjq_queue_paused", processo="") is None
    until = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    depth.publish([], (Pause(None, None), Pause("a", until)))
    assert value(observer, "nsjq_queue_paused", processo="") == 1
    assert value(observer, "nsjq_queue_paused", processo="a") == 1
    assert value(observer, "nsjq_queue_paused_until_timestamp_seconds", processo="") is None
    assert value(observer, "nsjq_queue_paused_until_timestamp_seconds", processo="a") == (
        until.timestamp()
    )
    clock.now += 31  # older than three intervals: its sampler is stuck
    assert value(observer, "nsjq_queue_tasks", processo="a", status="pendente") is None
    assert value(observer, "nsjq_queue_paused", processo="a") is None
    content_type, body = observer.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")


# -- the depth sampler's leadership ---------------------------------------------------------


class FakeConn:
    def __init__(self) -> None:
        self.closed = False
        self.commits = 0

    def commit(self) -> None:
        self.commits += 1

    def close(self) -> None:
        self.closed = True


class FakeLock:
    def __init__(self, free: bool) -> None:
        self.free = free
        self.released: list[FakeConn] = []

    def acquire(self, conn) -> bool:
        return self.free

    def release(self, conn) -> None:
        self.released.append(conn)


class FakeStore:
    queue_table = "public.q"  # its pauses: none (a FakeConn belongs to no driver)

    def __init__(self) -> None:
        self.fail = False

    def depth(self, conn):
        if self.fail:
            raise OSError("connection lost")
        return [{"processo": "a", "status": "pendente", "tasks": 1, "oldest_ready_seconds": 1.0}]


def test_only_the_lock_holder_samples_on_one_kept_connection():
    conns: list[FakeConn] = []

    def connect() -> FakeConn:
        conns.append(FakeConn())
        return conns[-1]

    store, lock, stop = FakeStore(), FakeLock(free=False), threading.Event()
    sampler = DepthSampler(store, connect, lock, stop, DepthSnapshot(interval=1))
    assert sampler.sample_once() is False
    assert sampler.snapshot.current() is None and conns[-1].closed  # nothing held meanwhile
    lock.free = True
    assert sampler.sample_once() and sampler.sample_once()
    assert len(conns) == 2 and not conns[1].closed and conns[1].commits == 2
    assert sampler.snapshot.current().rows[0]["tasks"] == 1
    store.fail = True
    assert sampler.sample_once() is False
    assert sampler.snapshot.current() is None and conns[1].closed and lock.released == [conns[1]]
    store.fail = False
    stop.set()
    sampler.run()  # stopped: lets go of whatever it holds
    assert not sampler.leading


def test_the_mysql_pool_reports_its_connections():
    from nsj_queue_lib.db.mysql.pool import SimplePool

    class Conn:
        open = True

        def rollback(self):
            pass

        def close(self):
            self.open = False

    pool = SimplePool(Conn, max_size=3, timeout=1)
    first, second = pool.getconn(), pool.getconn()
    assert pool.get_stats() == {"pool_max": 3, "pool_size": 2, "pool_available": 0}
    pool.putconn(first)
    assert pool.get_stats() == {"pool_max": 3, "pool_size": 2, "pool_available": 1}
    second.open = False
    pool.putconn(second)  # a closed connection is dropped
    assert pool.get_stats() == {"pool_max": 3, "pool_size": 1, "pool_available": 1}


# -- nsjq health --------------------------------------------------------------------------


def test_nsjq_health_asks_the_workers_endpoint(serve, capsys, monkeypatch):
    stop, contact = threading.Event(), Contact()
    port = serve(Health(stop, contact, stale_after=60))
    monkeypatch.setenv("QUEUE_METRICS_PORT", str(port))
    assert nsjq(["health"]) == 1
    assert capsys.readouterr().out.startswith(
        f"ready: FAILED (http://127.0.0.1:{port}/readyz: HTTP 503"
    )
    assert nsjq(["health", "--live"]) == 0
    contact.opened()
    assert nsjq(["--json", "health"]) == 0
    capsys.readouterr()
    assert nsjq(["health", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["healthy"] is True and document["answer"]["status"] == "ready"
    assert document["http_status"] == 200 and document["check"] == "ready"
    assert nsjq(["health", "--port", str(free_port())]) == 1  # nothing listens
    monkeypatch.delenv("QUEUE_METRICS_PORT")
    assert nsjq(["health"]) == 2
    assert "QUEUE_METRICS_PORT" in capsys.readouterr().err


# -- without prometheus_client ----------------------------------------------------------------

WITHOUT_CLIENT = """
import sys
sys.modules["prometheus_client"] = None  # as if it were not installed
import nsj_queue_lib, nsj_queue_lib.runtime.worker_runtime, nsj_queue_lib.worker_base
from nsj_queue_lib import WorkerBase

class Worker(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        return None

sys.exit(Worker().run_until_stopped(install_signal_handlers=False))
"""


def test_a_worker_without_prometheus_client_refuses_the_metrics_port_at_start():
    environ = clean_env(
        DB_HOST="127.0.0.1", DB_BASE="nowhere", DB_USER="nobody", DB_PORT="1",
        QUEUE_NAME="q", QUEUE_TABLE="q", QUEUE_METRICS_PORT=str(free_port()),
    )  # fmt: skip
    result = run_python("-c", WITHOUT_CLIENT, env=environ, timeout=30)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "QUEUE_METRICS_PORT" in last and "pip install 'nsj-queue-lib[metrics]'" in last
    assert MISSING_CLIENT in last


def test_the_webhook_subscribers_circuit_breakers_are_counted():
    class Breakers:
        opened = {"hook": 2}
        closed = {"hook": 1}
        open_now = {"hook": True, "other": False}

    observer = PrometheusObserver("q")
    observer.register_subscriber_breakers(Breakers())
    opened = "nsjq_subscriber_circuit_breaker_opened_total"
    assert value(observer, opened, subscriber="hook") == 2
    assert value(observer, opened, subscriber="other") == 0
    closed = "nsjq_subscriber_circuit_breaker_closed_total"
    assert value(observer, closed, subscriber="hook") == 1
    assert value(observer, "nsjq_subscriber_circuit_breaker_open", subscriber="hook") == 1
    assert value(observer, "nsjq_subscriber_circuit_breaker_open", subscriber="other") == 0
