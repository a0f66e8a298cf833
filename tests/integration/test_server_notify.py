"""Subscriptions, fan-out, and clients that outlive a server restart."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from nsj_queue_lib.client import NotifyClient, ServerConnectionError
from tests.helpers.server_process import (
    TEST_TOKEN,
    wait_until,
)


def test_notify_fans_out_to_every_subscriber_of_the_queue(servers):
    server = servers()
    workers = [server.notify_client(f"w{i}") for i in range(3)]
    for worker in workers:
        worker.subscribe("fila_teste")
    elsewhere = server.notify_client("other-queue")
    elsewhere.subscribe("outra_fila")
    sender = server.notify_client("sender")
    assert sender.notify("fila_teste") == 3
    assert sender.notify("fila_teste", "HALT") == 3
    for worker in workers:
        got: list = []
        assert wait_until(
            lambda got=got, worker=worker: got.extend(worker.wait(0.1)) or len(got) >= 2,
            timeout=5,
        )
        assert got == [("fila_teste", ""), ("fila_teste", "HALT")]
    assert elsewhere.wait(0.2) == []
    assert sender.notify("nobody_listens") == 0


def test_queue_names_are_case_insensitive(servers):
    server = servers()
    listener = server.notify_client()
    listener.subscribe("Fila_Teste")
    assert listener.queues == ["fila_teste"]
    assert server.notify_client("sender").notify("FILA_TESTE", "x") == 1
    assert listener.wait(5) == [("fila_teste", "x")]


def test_a_sender_that_subscribed_is_notified_too(servers):
    server = servers()
    client = server.notify_client()
    client.subscribe("fila_teste")
    assert client.notify("fila_teste", "self") == 1
    # The notification arrived before the reply and was kept.
    assert client.has_pending()
    assert client.wait(0) == [("fila_teste", "self")]
    assert not client.has_pending()


def test_read_notifications_is_non_blocking_and_fileno_works_with_select(servers):
    import select

    server = servers()
    listener = server.notify_client()
    listener.subscribe("fila_teste")
    started = time.monotonic()
    assert listener.read_notifications() == []
    assert time.monotonic() - started < 0.1
    server.notify_client("sender").notify("fila_teste", "a")
    readable, _, _ = select.select([listener.fileno()], [], [], 5)
    assert readable == [listener.fileno()]
    assert listener.read_notifications() == [("fila_teste", "a")]


def test_unsubscribe_stops_the_notifications(servers):
    server = servers()
    listener = server.notify_client()
    listener.subscribe("fila_teste")
    listener.unsubscribe("fila_teste")
    assert listener.queues == []
    assert server.notify_client("sender").notify("fila_teste") == 0


def test_wait_returns_on_the_interrupt_fd(servers):
    server = servers()
    listener = server.notify_client()
    listener.subscribe("fila_teste")
    r, w = socket.socketpair()
    try:
        threading.Timer(0.1, lambda: w.send(b"x")).start()
        started = time.monotonic()
        assert listener.wait(10, interrupt_fd=r.fileno()) == []
        assert time.monotonic() - started < 5
    finally:
        r.close()
        w.close()


def test_a_burst_of_notifications_is_delivered_in_order(servers):
    server = servers()
    listener = server.notify_client()
    listener.subscribe("fila_teste")
    sender = server.notify_client("sender")
    for i in range(500):
        sender.notify("fila_teste", str(i))
    got: list = []
    assert wait_until(lambda: got.extend(listener.wait(0.1)) or len(got) >= 500, timeout=10)
    assert [p for _, p in got] == [str(i) for i in range(500)]


def test_server_restart_clients_raise_then_reconnect(servers):
    server = servers()
    locks = server.lock_client("worker")
    listener = server.notify_client("worker")
    listener.subscribe("fila_teste")
    assert locks.try_lock("tarefa:1")

    server.restart()

    with pytest.raises(ServerConnectionError):
        locks.try_lock("tarefa:2")
    assert not locks.connected
    with pytest.raises(ServerConnectionError):
        listener.wait(5)
    # Every later call fails the same way until reconnect().
    with pytest.raises(ServerConnectionError):
        locks.held(["tarefa:1"])
    with pytest.raises(ServerConnectionError):
        listener.fileno()

    assert locks.reconnect(max_wait=10) is True
    assert locks.reconnect() is True  # already connected: nothing to do
    # The locks held before are taken again (their holder is still running).
    assert locks.held(["tarefa:1"]) == {"tarefa:1"}
    assert locks.holding() == {"tarefa:1"}
    assert locks.try_lock("tarefa:1")

    assert listener.reconnect(max_wait=10) is True
    assert listener.queues == ["fila_teste"]  # subscriptions are renewed
    assert server.notify_client("sender").notify("fila_teste", "after-restart") == 1
    assert listener.wait(5) == [("fila_teste", "after-restart")]


def test_reconnect_waits_with_back_off_until_the_server_is_back(servers):
    server = servers()
    locks = server.lock_client("worker")
    listener = server.notify_client("worker")
    listener.subscribe("fila_teste")
    server.stop()
    results: dict[str, bool] = {}
    stop = threading.Event()

    def reconnect(name, client):
        with pytest.raises(ServerConnectionError):
            client.ping()
        results[name] = client.reconnect(stop=stop, max_wait=20, max_delay=0.5)

    threads = [
        threading.Thread(target=reconnect, args=a)
        for a in (("locks", locks), ("listener", listener))
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.7)  # the clients retry meanwhile; the server is down
    assert results == {}
    server.start()
    for thread in threads:
        thread.join(20)
    assert results == {"locks": True, "listener": True}
    assert locks.try_lock("x")
    assert server.notify_client("sender").notify("fila_teste") == 1


def test_many_threads_reconnecting_one_client_open_one_connection(servers):
    server = servers()
    locks = server.lock_client("shared")
    server.restart()
    with pytest.raises(ServerConnectionError):
        locks.ping()
    outcomes: list[bool] = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(locks.reconnect(max_wait=10)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert outcomes == [True] * 8
    assert locks.try_lock("x")
    # Only one hello after the restart: the other threads found it connected.
    assert server.log_text(since_start=True).count("hello on the lock service") == 1


def test_notify_client_from_settings_uses_the_notify_port(servers):
    from nsj_queue_lib.client import LockClient
    from nsj_queue_lib.settings import Settings

    server = servers()
    settings = Settings(
        db_host="unused",
        db_name="unused",
        db_user="unused",
        server_host="127.0.0.1",
        notify_service_port=server.notify_port,
        lock_service_port=server.lock_port,
        queue_server_token=TEST_TOKEN,
        timeout_socket_message=3,
    )
    with (
        NotifyClient.from_settings(settings, "settings") as listener,
        LockClient.from_settings(settings, "settings") as locks,
    ):
        assert (listener.port, locks.port, listener.timeout) == (
            server.notify_port,
            server.lock_port,
            3.0,
        )
        listener.subscribe("fila_teste")
        assert locks.try_lock("x")
