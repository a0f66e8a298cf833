"""Named try-locks owned by connections, served by a real server process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from nsj_queue_lib.client import LockClient, ServerConnectionError
from tests.helpers.server_process import (
    ROOT,
    TEST_TOKEN,
    wait_until,
)


def test_a_lock_is_exclusive_across_clients(servers):
    server = servers()
    a, b = server.lock_client("a"), server.lock_client("b")
    assert a.try_lock("tarefa:1") is True
    assert b.try_lock("tarefa:1") is False
    assert b.try_lock("tarefa:2") is True
    assert a.try_lock("tarefa:2") is False
    assert a.held(["tarefa:1", "tarefa:2", "tarefa:3"]) == {"tarefa:1", "tarefa:2"}
    assert b.held(["tarefa:1", "tarefa:2", "tarefa:3"]) == {"tarefa:1", "tarefa:2"}
    assert a.held([]) == set()


def test_relocking_is_idempotent_and_one_unlock_releases(servers):
    server = servers()
    a, b = server.lock_client("a"), server.lock_client("b")
    assert a.try_lock("x") and a.try_lock("x")  # the owner asks again: still True
    assert a.unlock("x") is True  # locks are not counted
    assert a.held(["x"]) == set()
    assert a.unlock("x") is False  # not held any more
    assert b.try_lock("x") is True


def test_only_the_owner_can_unlock(servers):
    server = servers()
    a, b = server.lock_client("a"), server.lock_client("b")
    assert a.try_lock("x")
    assert b.unlock("x") is False
    assert b.held(["x"]) == {"x"}
    assert a.unlock("x") is True
    assert b.held(["x"]) == set()


def test_two_clients_of_one_process_are_different_owners(servers):
    server = servers()
    a, b = server.lock_client("same-name"), server.lock_client("same-name")
    assert a.try_lock("x") and not b.try_lock("x")


def test_closing_a_client_releases_its_locks_at_once(servers):
    server = servers()
    a, b = server.lock_client("a"), server.lock_client("b")
    names = [f"tarefa:{i}" for i in range(50)]
    assert all(a.try_lock(n) for n in names)
    assert b.held(names) == set(names)
    a.close()
    assert wait_until(lambda: b.held(names) == set(), timeout=1)
    assert all(b.try_lock(n) for n in names)
    with pytest.raises(ServerConnectionError):
        a.try_lock("again")
    assert a.reconnect() is False  # closed for good


def test_both_ports_serve_locks_from_one_table(servers):
    server = servers()
    on_lock_port = server.lock_client("l")
    on_notify_port = server.lock_client("n", port=server.notify_port)
    assert on_lock_port.try_lock("shared")
    assert on_notify_port.try_lock("shared") is False
    assert on_notify_port.held(["shared"]) == {"shared"}


VICTIM = textwrap.dedent(
    """
    import sys, time
    from nsj_queue_lib.client import LockClient
    client = LockClient("127.0.0.1", int(sys.argv[1]), sys.argv[2], "victim", 5)
    for name in sys.argv[3:]:
        assert client.try_lock(name)
    print("locked", flush=True)
    time.sleep(120)
    """
)


def test_kill_9_of_a_client_releases_its_locks_at_once(servers):
    server = servers()
    names = ["tarefa:10", "tarefa:11", "servico:retry"]
    victim = subprocess.Popen(
        [sys.executable, "-c", VICTIM, str(server.lock_port), TEST_TOKEN, *names],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert victim.stdout.readline().strip() == "locked"
        observer = server.lock_client("retry-service")
        assert observer.held(names) == set(names)
        assert observer.try_lock("tarefa:10") is False
        victim.kill()  # SIGKILL
        victim.wait(10)
        killed = time.monotonic()
        assert wait_until(lambda: observer.held(names) == set(), timeout=2, interval=0.005)
        released_after = time.monotonic() - killed
        assert released_after < 0.5, released_after
        assert observer.try_lock("tarefa:10") is True
        assert "(victim)" in server.log_text() and "released 3 lock(s)" in server.log_text()
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(10)


def test_one_client_is_safe_to_share_between_threads(servers):
    server = servers()
    shared = server.lock_client("shared")
    other = server.lock_client("other")
    assert other.try_lock("taken")
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(150):
                name = f"t{worker}:{i}"
                assert shared.try_lock(name) is True
                assert shared.try_lock("taken") is False
                assert shared.held([name, "taken"]) == {name, "taken"}
                assert shared.unlock(name) is True
        except BaseException as exc:  # the test asserts none were collected
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    assert other.held([f"t{w}:{i}" for w in range(8) for i in range(150)]) == set()


def test_lock_names_are_opaque_strings(servers):
    server = servers()
    a, b = server.lock_client("a"), server.lock_client("b")
    names = ["fila_teste:tarefa:1", "Fila Teste/ação ✓", "x" * 256]
    assert all(a.try_lock(n) for n in names)
    assert b.held(names + ["FILA_TESTE:TAREFA:1"]) == set(names)  # case-sensitive


def test_a_client_that_cannot_connect_says_where(servers):
    server = servers()
    port = server.lock_port
    server.stop()
    with pytest.raises(ServerConnectionError) as info:
        LockClient("127.0.0.1", port, TEST_TOKEN, "late", 2)
    assert f"127.0.0.1:{port}" in str(info.value)
    client = LockClient("127.0.0.1", port, TEST_TOKEN, "late", 2, connect=False)
    assert not client.connected
    with pytest.raises(ServerConnectionError):
        client.try_lock("x")
    started = time.monotonic()
    assert client.reconnect(max_wait=0.5) is False
    assert time.monotonic() - started < 2
    stop = threading.Event()
    stop.set()
    assert client.reconnect(stop=stop) is False


def test_a_lock_taken_by_another_client_while_disconnected_is_dropped_on_reconnect(servers):
    server = servers()
    first = server.lock_client("first")
    assert first.try_lock("tarefa:9")
    server.restart()
    second = server.lock_client("second")
    assert second.try_lock("tarefa:9")  # the server forgot the first client's lock
    with pytest.raises(ServerConnectionError):
        first.ping()  # the first call after the restart finds the connection gone
    assert first.reconnect(max_wait=10) is True
    assert first.holding() == set()
    assert second.held(["tarefa:9"]) == {"tarefa:9"}
