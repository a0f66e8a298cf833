"""The server's check-tasks thread on a real PostgreSQL: polling and the LISTEN relay."""

from __future__ import annotations

import secrets
import statistics
import time

import pytest

from nsj_queue_lib.db.dialect import notify_channel
from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.db.postgres.driver import server_application_name
from nsj_queue_lib.settings import Settings
from tests.helpers.server_process import (
    pg_env,
    unreachable_db_env,
)


def server_env(pg_queue, interval: float) -> dict[str, str]:
    return {
        **pg_env(pg_queue.dsn),
        "QUEUE_NAME": pg_queue.name,
        "QUEUE_TABLE": pg_queue.table,
        "CHECK_TASKS_INTERVAL": str(interval),
    }


def insert(conn, table: str, status: str = "pendente", delay: str = "0 seconds") -> int:
    return conn.execute(
        f"INSERT INTO {table} (origem, destino, processo, status, data_hora, payload) "
        "VALUES ('test', 'test', 'p', %s, clock_timestamp() + %s::interval, 'x') RETURNING id",
        (status, delay),
    ).fetchone()[0]


def collect(listener, seconds: float) -> list:
    got: list = []
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        got += listener.wait(remaining)
    return got


def test_check_tasks_wakes_subscribers_when_tasks_are_ready(pg_queue, servers, pg_autocommit):
    # No trigger: only the server's poll can tell the workers.
    pg_autocommit.execute(
        f"ALTER TABLE {pg_queue.table} DISABLE TRIGGER trigger_insert_{pg_queue.name}"
    )
    insert(pg_autocommit, pg_queue.table, "pendente", "1 hour")  # not due yet
    insert(pg_autocommit, pg_queue.table, "agendada", "1 hour")
    server = servers(env=server_env(pg_queue, 0.2))
    listener = server.notify_client("worker")
    listener.subscribe(pg_queue.name)
    assert server.wait_for_log("check-tasks: connected")
    assert collect(listener, 0.7) == []  # several polls, nothing ready

    task = insert(pg_autocommit, pg_queue.table, "pendente")
    started = time.monotonic()
    got = listener.wait(3)
    assert got and got[0] == (pg_queue.name, ""), got
    assert time.monotonic() - started < 1.0

    # Once nothing is ready the wake-ups stop...
    pg_autocommit.execute(f"UPDATE {pg_queue.table} SET status = 'sucesso' WHERE id = %s", (task,))
    collect(listener, 0.3)  # polls that ran before the update
    assert collect(listener, 0.6) == []
    # ...and a scheduled retry that falls due wakes them again.
    insert(pg_autocommit, pg_queue.table, "agendada", "-1 second")
    got = listener.wait(3)
    assert got and got[0] == (pg_queue.name, ""), got


def test_pg_notifications_are_relayed_at_once(pg_queue, servers, pg_autocommit):
    server = servers(env=server_env(pg_queue, 60))  # the poll stays out of the way
    listener = server.notify_client("worker")
    listener.subscribe(pg_queue.name)
    assert server.wait_for_log("listening on channel")
    channel = notify_channel(pg_queue.name)

    latencies = []
    for i in range(5):
        payload = f"ping-{i}"
        started = time.monotonic()
        pg_autocommit.execute("SELECT pg_notify(%s, %s)", (channel, payload))
        got = listener.wait(2)
        latencies.append(time.monotonic() - started)
        assert got == [(pg_queue.name, payload)]
    assert statistics.median(latencies) < 0.1, latencies
    assert max(latencies) < 1.0, latencies

    started = time.monotonic()
    pg_autocommit.execute(f"NOTIFY {pg_queue.name}, 'HALT'")
    assert listener.wait(2) == [(pg_queue.name, "HALT")]
    assert time.monotonic() - started < 1.0
    assert "relaying NOTIFY" in server.log_text() and "'HALT'" in server.log_text()

    # The queue's own trigger (an insert of a ready task) reaches the worker the same way.
    insert(pg_autocommit, pg_queue.table)
    assert listener.wait(2) == [(pg_queue.name, "")]


def test_the_relay_reconnects_after_losing_the_database(pg_queue, servers, pg_autocommit):
    server = servers(env=server_env(pg_queue, 60))
    listener = server.notify_client("worker")
    listener.subscribe(pg_queue.name)
    assert server.wait_for_log("listening on channel")
    killed = pg_autocommit.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
        (server_application_name(pg_queue.name),),
    ).fetchone()[0]
    assert killed == 2  # the poll and the LISTEN connections
    assert server.wait_for_log("listening on channel", count=2, timeout=15)
    assert "reconnecting in" in server.log_text()
    collect(listener, 0.1)  # the poll of the new session may have nothing to say, or ""
    pg_autocommit.execute("SELECT pg_notify(%s, 'back')", (notify_channel(pg_queue.name),))
    got = listener.wait(3)
    assert (pg_queue.name, "back") in got
    # The socket service never stopped meanwhile.
    assert server.lock_client().try_lock("x")


def test_an_unreachable_database_does_not_stop_the_socket_service(servers):
    server = servers(env=unreachable_db_env())
    assert server.wait_for_log("check-tasks:") and server.wait_for_log("reconnecting in")
    client = server.lock_client()
    assert client.try_lock("x")
    listener = server.notify_client()
    listener.subscribe("fila_teste")
    assert server.notify_client("sender").notify("fila_teste") == 1
    assert listener.wait(2) == [("fila_teste", "")]


@pytest.mark.mysql
def test_the_mysql_poll(mysql_kwargs):
    import pymysql

    table = f"q_srv_{secrets.token_hex(4)}"
    conn = pymysql.connect(**mysql_kwargs, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE {table} (id bigint AUTO_INCREMENT PRIMARY KEY, "
                "status varchar(100) NOT NULL, data_hora datetime(6) NOT NULL)"
            )
        settings = Settings(
            db_host=mysql_kwargs["host"],
            db_port=mysql_kwargs["port"],
            db_name=mysql_kwargs["database"],
            db_user=mysql_kwargs["user"],
            db_pass=mysql_kwargs["password"],
            db_driver="MYSQL",
            queue_name=table,
            queue_table=table,
        )
        source = make_driver(settings).task_source()
        source.open()
        try:
            assert source.supports_listen is False
            assert source.has_ready_tasks() is False
            with conn.cursor() as cur:
                cur.execute(
                    f"INSERT INTO {table} (status, data_hora) VALUES "
                    "('pendente', CURRENT_TIMESTAMP(6) + INTERVAL 1 HOUR), "
                    "('agendada', CURRENT_TIMESTAMP(6) + INTERVAL 1 HOUR), "
                    "('sucesso', CURRENT_TIMESTAMP(6) - INTERVAL 1 HOUR)"
                )
            assert source.has_ready_tasks() is False
            with conn.cursor() as cur:
                cur.execute(
                    f"INSERT INTO {table} (status, data_hora) VALUES "
                    "('agendada', CURRENT_TIMESTAMP(6) - INTERVAL 1 SECOND)"
                )
            assert source.has_ready_tasks() is True
            with conn.cursor() as cur:
                cur.execute(
                    f"UPDATE {table} SET status = 'pendente' WHERE status = 'agendada' "
                    "AND data_hora < CURRENT_TIMESTAMP(6)"
                )
            assert source.has_ready_tasks() is True
        finally:
            source.close()
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()
