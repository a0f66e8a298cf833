"""WorkerRuntime refuses settings its database cannot honour (Driver.check_settings), built
in code or read from the environment alike."""

from __future__ import annotations

import pytest

from nsj_queue_lib import Settings
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.runtime.worker_runtime import WorkerRuntime


def settings(**changes) -> Settings:
    base = Settings(
        db_host="127.0.0.1", db_name="test", db_user="root", queue_name="fila", queue_table="fila"
    )
    return base.with_changes(**changes)


def noop(tarefa, bd_conn):
    return None


@pytest.mark.parametrize("driver", ["MYSQL", "SINGLE_STORE"])
def test_asynchronous_commits_are_refused_outside_postgresql(driver):
    with pytest.raises(ConfigError) as info:
        WorkerRuntime(
            settings(
                db_driver=driver,
                db_port=3306,
                client_server_mode=True,
                queue_synchronous_commit=False,
            ),
            noop,
        )
    assert set(info.value.problems) == {"QUEUE_SYNCHRONOUS_COMMIT"}


def test_singlestore_needs_the_socket_server():
    with pytest.raises(ConfigError) as info:
        WorkerRuntime(settings(db_driver="SINGLE_STORE", db_port=3306), noop)
    assert set(info.value.problems) == {"CLIENT_SERVER_MODE"}


@pytest.mark.parametrize(
    "field, variable", [("queue_name", "QUEUE_NAME"), ("queue_table", "QUEUE_TABLE")]
)
def test_a_worker_needs_a_queue(field, variable):
    """Settings built in code may leave the queue out (a socket server client); a worker may not."""
    with pytest.raises(ConfigError) as info:
        WorkerRuntime(settings(**{field: ""}), noop)
    assert info.value.problems == {variable: "is required"}


def test_listen_is_refused_where_the_database_has_none():
    with pytest.raises(ConfigError) as info:
        WorkerRuntime(settings(db_driver="MYSQL", db_port=3306, queue_wakeup="listen"), noop)
    assert set(info.value.problems) == {"QUEUE_WAKEUP"}
    assert "no LISTEN" in info.value.problems["QUEUE_WAKEUP"]


@pytest.mark.parametrize(
    "changes, mode, listener",
    [
        ({}, "listen", "CheckedListener"),
        ({"queue_wakeup": "poll"}, "poll", "PollingListener"),
        ({"client_server_mode": True}, "server", "ServerListener"),
        ({"client_server_mode": True, "queue_wakeup": "poll"}, "poll", "PollingListener"),
        ({"db_driver": "MYSQL", "db_port": 3306}, "poll", "PollingListener"),
    ],
)
def test_the_wakeup_mode_picks_the_listener(changes, mode, listener):
    from nsj_queue_lib.db.driver import make_driver

    driver = make_driver(settings(**changes))
    assert driver.wakeup_mode() == mode
    assert type(driver.listener()).__name__ == listener
