"""Guards of the socket server and of client/server mode (issue 22, scripts/mutants.py).

- The retry service of a client/server worker rescues a task only when its
  server lock is free at two looks a grace period apart (a socket server
  that restarted has every lock free until the workers reconnect). A lock
  taken again between the looks must save the task. The test's lock client
  hands the service the real answers and, right after the first look, a
  "worker" takes the lock: no timing is guessed.
- A client refused at hello gets nothing more: what it sends next is
  ignored, and the server never records it as authenticated.

The server is a real process (``python -m nsj_queue_lib.server``); its
database is unreachable on purpose, only the lock service is used.
"""

from __future__ import annotations

import re
import socket
import time

from nsj_queue_lib import model, protocol
from nsj_queue_lib.runtime.liveness import task_lock_name
from nsj_queue_lib.runtime.retry import RetryService
from tests.helpers.processes import fetch_rows, settings_for
from tests.helpers.services import make_service

FAST = 0.2  # TIMEOUT_SOCKET_MESSAGE: the retry service's grace period is 2 x 0.2 + 1 s


class LockTakenAfterFirstLook:
    """The retry service's lock client; after the service's first ``held`` look, ``take()`` runs."""

    def __init__(self, client, take):
        self._client = client
        self._take = take
        self.looks = 0

    def held(self, names):
        answer = self._client.held(names)
        self.looks += 1
        if self.looks == 1:
            self._take()
        return answer

    def __getattr__(self, name):
        return getattr(self._client, name)


def frames_until_closed(sock: socket.socket, timeout: float = 5.0) -> tuple[list[dict], bool]:
    """(the frames the server sent, whether it closed the connection within ``timeout``)."""
    decoder = protocol.FrameDecoder()
    deadline = time.monotonic() + timeout
    closed = False
    while not closed and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:  # reset
            data = b""
        closed = not data
        decoder.feed(data)
    frames = []
    while (message := decoder.next_message()) is not None:
        frames.append(message)
    return frames, closed


def processing_row(conn, table: str) -> int:
    """A 'processando' attempt with no live worker in the database's eyes."""
    return conn.execute(
        f"INSERT INTO {table} (origem, destino, processo, payload, status) "
        "VALUES ('teste', 'worker', 'processar', 'p', 'processando') RETURNING id"
    ).fetchone()[0]


def retry_service(pg_dsn: str, table: str, lock_client) -> RetryService:
    settings = settings_for(pg_dsn, table, client_server_mode=True, timeout_socket_message=FAST)
    service = make_service(RetryService, settings, lock_client=lock_client)
    assert isinstance(service, RetryService)
    return service


def test_a_task_whose_server_lock_is_taken_again_during_the_grace_period_is_not_rescued(
    servers, pg_queue, pg_dsn, pg_autocommit
):
    server = servers(timeout_socket_message=FAST)
    table = pg_queue.table
    task_id = processing_row(pg_autocommit, table)
    queue_oid = pg_autocommit.execute("SELECT %s::regclass::oid::bigint", (table,)).fetchone()[0]
    name = task_lock_name(queue_oid, task_id)
    worker = server.lock_client("worker-coming-back")

    def the_worker_takes_its_lock_again() -> None:
        assert worker.try_lock(name)

    client = LockTakenAfterFirstLook(
        server.lock_client("retry-service"), the_worker_takes_its_lock_again
    )
    service = retry_service(pg_dsn, table, client)
    assert service.run_once() == 0
    assert client.looks == 2  # the second look, after the grace period, saw the lock
    [row] = fetch_rows(pg_autocommit, table)
    assert row["status"] == "processando"

    # Free at both looks: now it is rescued (the service itself works).
    assert worker.unlock(name)
    assert service.run_once() == 1
    rows = fetch_rows(pg_autocommit, table)
    assert rows[0]["status"] == model.FALHA_PROCESSANDO
    assert [r["id_anterior"] for r in rows[1:]] == [task_id]


def test_a_client_refused_at_hello_gets_nothing_more_and_is_never_authenticated(servers):
    server = servers(timeout_socket_message=0.5)
    sock = server.raw_socket()
    sock.sendall(protocol.encode({"op": "hello", "id": 1, "token": "wrong", "client": "insistent"}))
    # It insists, as if the refusal had not come: the lock request must be ignored.
    try:
        sock.sendall(protocol.encode({"op": "lock", "id": 2, "name": "guarded"}))
    except OSError:
        pass  # the server may have closed already
    frames, closed = frames_until_closed(sock)
    assert closed
    assert [(f["id"], f["ok"], f.get("error")) for f in frames] == [(1, False, "unauthorized")]
    sock.close()
    assert server.lock_client("good").try_lock("guarded")

    found = re.search(
        r"conn #(\d+) from \S+ \(client 'insistent'\): authentication failed", server.log_text()
    )
    assert found, server.log_text()
    conn = found.group(1)
    assert server.wait_for_log(f"closed conn #{conn} "), server.log_text()
    log = server.log_text()
    # Never labelled with its client name (only authenticated connections are), never greeted.
    assert "(insistent) from" not in log
    [closing] = [line for line in log.splitlines() if f"closed conn #{conn} " in line]
    assert closing.endswith(": refused"), closing
