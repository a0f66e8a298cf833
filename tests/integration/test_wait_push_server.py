"""``wait_for_task``'s push through the socket server (workflow/server_ends.py), with a real
server process: a waiter holds its task's end lock and listens on the queue's end channel;
a worker's announcer notifies the ended tasks someone waits for, and only those. On
MariaDB, a worker in CLIENT_SERVER_MODE announces the end a client waits for
(``wait_for_task(..., server=settings)``)."""

from __future__ import annotations

import threading
import time

import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.client.lock_client import LockClient
from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.web.connections import Connections
from nsj_queue_lib.web.queues import Queue
from nsj_queue_lib.workflow import server_ends, waiting
from nsj_queue_lib.workflow.server_ends import EndAnnouncer, ServerEndWaiter
from tests.helpers.mysql_queue import mysql_settings
from tests.helpers.processes import QUIET_SETTINGS, InProcessWorker, function_worker, wait_for
from tests.helpers.server_process import TEST_TOKEN, ServerProcess, free_port

pytestmark = pytest.mark.timeout(60)
TABLE = "public.q_push"


def server_settings(server: ServerProcess | None, **changes) -> Settings:
    return Settings(
        db_host="127.0.0.1",
        db_name="d",
        db_user="u",
        queue_name="q_push",
        queue_table=TABLE,
        client_server_mode=True,
        server_host="127.0.0.1",
        notify_service_port=server.notify_port if server else free_port(),
        lock_service_port=server.lock_port if server else free_port(),
        queue_server_token=TEST_TOKEN,
        timeout_socket_message=1.0,
        **changes,
    )


@pytest.fixture
def server(tmp_path):
    started = ServerProcess(tmp_path / "server").start()
    try:
        yield started
    finally:
        started.stop()


def announcer(settings: Settings, stop: threading.Event) -> tuple[EndAnnouncer, LockClient]:
    locks = LockClient.from_settings(settings, "test-worker")
    return EndAnnouncer(TABLE, locks, stop), locks


def test_only_the_tasks_someone_waits_for_are_notified(server):
    settings = server_settings(server)
    waiter = ServerEndWaiter.open(settings, TABLE, lambda: {"id": 41})
    ends, locks = announcer(settings, threading.Event())
    try:
        assert waiter.register(41) == (True, {"id": 41})
        assert ends.announce([40, 42]) == 0
        assert waiter.wait(0.3) is False  # nothing was sent for them
        assert ends.announce([40, 41, 42, 41]) == 1
        started = time.monotonic()
        assert waiter.wait(5) is True
        assert time.monotonic() - started < 1
        assert waiter.look_and_close() == {"id": 41}  # and its lock goes
        assert ends.announce([41]) == 0
    finally:
        waiter.close()
        locks.close()


def test_a_second_waiter_of_the_task_polls(server):
    settings = server_settings(server)
    first = ServerEndWaiter.open(settings, TABLE, lambda: None)
    second = ServerEndWaiter.open(settings, TABLE, lambda: None)
    try:
        assert first.register(7)[0] is True
        assert second.register(7)[0] is False
    finally:
        first.close()
        second.close()


def test_an_unreachable_server_leaves_the_wait_polling():
    waiter = ServerEndWaiter.open(server_settings(None), TABLE, lambda: {"id": 3})
    try:
        assert waiter.register(3) == (False, {"id": 3})
        started = time.monotonic()
        assert waiter.wait(0.2) is False  # no busy loop of looks
        assert time.monotonic() - started >= 0.15
    finally:
        waiter.close()


def test_the_announcer_thread_tells_what_ended(server):
    settings = server_settings(server)
    stop = threading.Event()
    ends, locks = announcer(settings, stop)
    thread = threading.Thread(target=ends.run, daemon=True)
    thread.start()
    waiter = ServerEndWaiter.open(settings, TABLE, lambda: None)
    try:
        assert waiter.register(99)[0] is True
        row = {"id": 120, "id_inicial": 99}  # a retry's attempt: its first's id is told
        ends.task_finished(TaskRecord(id=120, tentativa=2, dead=False, payload=None, row=row), "x")
        assert waiter.wait(5) is True
    finally:
        stop.set()
        thread.join(5)
        waiter.close()
        locks.close()


@pytest.mark.mysql
def test_wait_for_task_on_mariadb_is_pushed_by_a_worker_in_server_mode(
    tmp_path, mysql_kwargs, mysql_queue, mysql_conn, monkeypatch
):
    table = mysql_queue.table
    env = {
        "DB_DRIVER": "MYSQL",
        "DB_HOST": mysql_kwargs["host"],
        "DB_PORT": str(mysql_kwargs["port"]),
        "DB_BASE": mysql_kwargs["database"],
        "DB_USER": mysql_kwargs["user"],
        "DB_PASS": mysql_kwargs.get("password") or "",
        "QUEUE_NAME": mysql_queue.name,
        "QUEUE_TABLE": table,
        "CHECK_TASKS_INTERVAL": "0.1",
    }
    server = ServerProcess(tmp_path / "server", env=env).start()
    settings = mysql_settings(
        mysql_kwargs,
        table,
        client_server_mode=True,
        server_host="127.0.0.1",
        notify_service_port=server.notify_port,
        lock_service_port=server.lock_port,
        queue_server_token=TEST_TOKEN,
        timeout_socket_message=1.0,
        queue_poll_interval=0.1,
        **QUIET_SETTINGS,
    )
    # Once registered, the waiter looks again only when woken, or after 10 s: a return
    # within seconds is the push's. The worker's announcer tells how many of the ends it
    # was given were waited for.
    monkeypatch.setattr(waiting, "FIRST_INTERVAL", 10.0)
    monkeypatch.setattr(waiting, "PUSHED_INTERVAL", 10.0)
    announced: list[int] = []
    original_announce = EndAnnouncer.announce

    def spied_announce(self, ids):
        count = original_announce(self, ids)
        announced.append(count)
        return count

    monkeypatch.setattr(server_ends.EndAnnouncer, "announce", spied_announce)
    worker = InProcessWorker(
        function_worker(settings, lambda payload, tarefa, bd_conn: time.sleep(1.5) or "slow")
    ).start()
    try:
        wait_for(lambda: worker.worker._runtime is not None, 10, "the worker's runtime")
        client = QueueClient(mysql_conn, table)
        task_id = client.insert_task(
            origem="a", destino="b", processo="p", chave_externa="k", payload={}
        )
        mysql_conn.commit()
        started = time.monotonic()
        view = client.wait_for_task(task_id, 30, server=settings)
        assert time.monotonic() - started < 6  # the task ran 1.5 s; unwoken, 10 s
        assert (view["id_inicial"], view["status"], view["mensagem"]) == (
            task_id,
            "sucesso",
            "slow",
        )
        wait_for(lambda: announced, 5, "the worker's announcement")
        assert sum(announced) == 1  # the worker found the waiter's lock and notified it
        # nsjq web's ?wait= (web/queues.py) passes its settings: pushed the same way.
        connections = Connections(make_driver(settings))
        try:
            queue = Queue(table, connections)
            task_id = queue.enqueue(
                {
                    "origem": "a",
                    "destino": "b",
                    "processo": "p",
                    "chave_externa": "w",
                    "payload": {},
                }
            )
            started = time.monotonic()
            view = queue.wait(task_id, 30)
            assert time.monotonic() - started < 6
            assert (view["id_inicial"], view["status"]) == (task_id, "sucesso")
            wait_for(lambda: sum(announced) == 2, 5, "the second announcement")
        finally:
            connections.close()
    finally:
        assert worker.stop() == 0
        server.stop()
