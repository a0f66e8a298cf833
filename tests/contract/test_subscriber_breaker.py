"""Circuit breakers per webhook subscriber (issue 43 item 3, docs/fleet-control.md): the
subscriber row's ``circuit_breaker_failures`` and ``circuit_breaker_cool_down_s``. After
N consecutive failed deliveries to one subscriber, its deliveries are held (no request)
for the cool-down, then one trial delivery decides; other subscribers' deliveries go on.
Real HTTP (tests.helpers.http_server), PostgreSQL (direct and through the socket
server) and MariaDB.
"""

from __future__ import annotations

import time

import pytest

from nsj_queue_lib import WorkerWebhook
from nsj_queue_lib.db.mysql.dialect import SUBSCRIBER_UPGRADE_COLUMNS
from nsj_queue_lib.db_gen import render
from nsj_queue_lib.fleet.subscriber_breakers import HELD_PREFIX
from tests.helpers.http_server import RecordingServer
from tests.helpers.mysql_queue import execute_script
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

WITH_BREAKERS = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)
PROCESSO = "nota_emitida"
FAILURES = 2
COOL_DOWN_S = 1.5
RETRY_BASE_MINUTES = 0.1 / 60  # a failed delivery's retry: tentativa * 0.1 s


def subscribe(backend, server, subscriber_id: str, breaker: bool) -> None:
    backend.add_subscriber(subscriber_id, PROCESSO, url=server.url(f"/{subscriber_id}"))
    if breaker:
        backend.execute(
            f"UPDATE {backend.subscriber_table} SET circuit_breaker_failures = %s, "
            "circuit_breaker_cool_down_s = %s WHERE id = %s",
            (FAILURES, COOL_DOWN_S, subscriber_id),
        )


def publish(backend, count: int, start: int = 0) -> list[int]:
    with backend.transaction() as conn:
        client = backend.client(conn)
        return [
            client.insert_task_webhook("fiscal", "webhooks", PROCESSO, f"nota-{n}", {"nota": n})
            for n in range(start, start + count)
        ]


def breaker(backend, subscriber_id: str) -> dict:
    return backend.query(
        f"SELECT * FROM {backend.subscriber_table} WHERE id = %s", (subscriber_id,)
    )[0]


def is_open(backend, subscriber_id: str) -> bool:
    return bool(breaker(backend, subscriber_id)["breaker_open"])


def delivered(backend, subscriber_id: str) -> list[dict]:
    return backend.rows("subscriber_id = %s AND status = %s", (subscriber_id, "sucesso"))


def requests_to(server, subscriber_id: str) -> list:
    return [r for r in server.requests if r.route == f"/{subscriber_id}"]


def webhook_worker(backend, concurrency: int = 2) -> WorkerWebhook:
    return WorkerWebhook(
        backend.settings(
            queue_concurrency=concurrency, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )


@WITH_BREAKERS
def test_a_failing_subscriber_opens_its_own_breaker_and_one_trial_closes_it(backend):
    with RecordingServer() as server:
        server.route("/fragil", statuses=[500])
        subscribe(backend, server, "fragil", breaker=True)
        subscribe(backend, server, "estavel", breaker=False)
        worker = backend.run(webhook_worker(backend))
        publish(backend, FAILURES)
        wait_for(lambda: is_open(backend, "fragil"), 10, "the breaker to open after 2 failures")
        opened_at = time.monotonic()
        failed_requests = len(requests_to(server, "fragil"))
        # While the breaker is open: another publication; the other subscriber gets every
        # one, the failing one's deliveries are held without a request.
        publish(backend, 1, start=FAILURES)
        wait_for(
            lambda: len(delivered(backend, "estavel")) == FAILURES + 1,
            COOL_DOWN_S * 0.8,
            "the other subscriber's deliveries during the cool-down",
        )
        assert is_open(backend, "fragil")
        server.route("/fragil", statuses=[200])
        wait_for(
            lambda: len(delivered(backend, "fragil")) == FAILURES + 1,
            15,
            "the trial and then the held deliveries",
        )
        requests = requests_to(server, "fragil")
        assert worker.stop() == 0

    assert failed_requests == FAILURES
    # No request during the cool-down; then the trial, alone, then the held ones.
    assert len(requests) == FAILURES + FAILURES + 1
    trial, *released = requests[FAILURES:]
    assert trial.received_at - opened_at >= COOL_DOWN_S - 0.1
    # Released by the trial's success: not at the end of their hold (another cool-down).
    gaps = [r.received_at - trial.received_at for r in released]
    assert all(0 <= gap < COOL_DOWN_S - 0.2 for gap in gaps), gaps
    row = breaker(backend, "fragil")
    assert (bool(row["breaker_open"]), row["breaker_failures"], bool(row["breaker_trial"])) == (
        False,
        0,
        False,
    )
    # Held attempts made no request and used none of the deliveries' attempts.
    held = backend.rows("subscriber_id = %s AND status = %s", ("fragil", "falha_processando"))
    assert held and all(h["mensagem"].startswith(HELD_PREFIX) for h in held)
    tries = sorted(d["tentativa"] for d in delivered(backend, "fragil"))
    assert tries == [1, 2, 2]


@WITH_BREAKERS
def test_a_failed_trial_opens_the_subscribers_breaker_again(backend):
    with RecordingServer() as server:
        server.route("/fragil", statuses=[500])
        subscribe(backend, server, "fragil", breaker=True)
        # One executor: a delivery admitted before the breaker opened still makes its
        # request (as a processo's task claimed before its breaker opened still runs), so
        # with more the number of requests before the opening would vary.
        webhook = webhook_worker(backend, concurrency=1)
        worker = backend.run(webhook)
        publish(backend, FAILURES + 2)
        wait_for(lambda: is_open(backend, "fragil"), 10, "the breaker to open after 2 failures")
        until = breaker(backend, "fragil")["breaker_until"]
        wait_for(
            lambda: breaker(backend, "fragil")["breaker_until"] > until,
            10,
            "the trial to fail and the breaker to open again",
        )
        requests = requests_to(server, "fragil")
        row = breaker(backend, "fragil")
        assert worker.stop() == 0

    # Two failures opened it, one trial (one request) opened it again.
    assert len(requests) == FAILURES + 1
    assert bool(row["breaker_open"]) and not row["breaker_trial"]
    assert (row["breaker_until"] - until).total_seconds() >= COOL_DOWN_S
    # Counted by the worker that opened it (its /metrics: nsjq_subscriber_circuit_breaker_*).
    assert webhook._breakers is not None
    assert webhook._breakers.opened == {"fragil": 2} and webhook._breakers.open_now["fragil"]


@pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
def test_the_upgrade_adds_the_breaker_columns_to_an_earlier_subscriber_table(backend):
    for column in SUBSCRIBER_UPGRADE_COLUMNS:
        backend.execute(f"ALTER TABLE {backend.subscriber_table} DROP COLUMN {column}")
    if backend.family == "postgres":
        backend.execute(render(backend.schema, backend.name, upgrade=True))
    else:
        execute_script(backend.admin, render(backend.schema, backend.name, "mysql", upgrade=True))
    backend.add_subscriber("hook", PROCESSO, url="http://127.0.0.1:9/")
    row = breaker(backend, "hook")
    assert {c: row[c] for c in SUBSCRIBER_UPGRADE_COLUMNS} == {
        "circuit_breaker_failures": None,
        "circuit_breaker_cool_down_s": None,
        "breaker_failures": 0,
        "breaker_open": False,
        "breaker_until": None,
        "breaker_trial": False,
        "breaker_trial_at": None,
        "breaker_trial_task": None,
    }
