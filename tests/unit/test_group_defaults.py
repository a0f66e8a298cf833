"""Group commit's defaults: the batch size, where it applies without a word, and the
isolation after a failed group commit (runtime/group_isolation.py, group_pace.py)."""

from __future__ import annotations

import logging
import threading
import types
from typing import Any

import pytest

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.runtime.async_executor import AsyncTaskExecutor
from nsj_queue_lib.runtime.executor import TaskExecutor
from nsj_queue_lib.runtime.group_commit import group_drain
from nsj_queue_lib.runtime.group_isolation import Isolation
from nsj_queue_lib.runtime.group_pace import Pace
from nsj_queue_lib.runtime.liveness import DatabaseLiveness
from nsj_queue_lib.settings import DEFAULT_BATCH_SIZE, Settings

ENV = dict(DB_HOST="h", DB_BASE="b", DB_USER="u", QUEUE_NAME="q", QUEUE_TABLE="public.q")


def test_the_batch_size_defaults_to_groups_and_one_still_means_one_commit_per_task():
    unset = Settings.from_env(ENV)
    assert unset.queue_batch_size is None and unset.batch_size == DEFAULT_BATCH_SIZE == 20
    assert Settings.from_env({**ENV, "QUEUE_BATCH_SIZE": "1"}).batch_size == 1
    for bad in ("0", "51", "x"):
        with pytest.raises(ConfigError, match="QUEUE_BATCH_SIZE"):
            Settings.from_env({**ENV, "QUEUE_BATCH_SIZE": bad})


def test_the_batch_size_bound_is_postgresqls_subtransaction_cache_there_only():
    """PostgreSQL caches 64 subtransactions per transaction: 50 at most there. InnoDB has
    no such cache: up to 200 on MySQL/MariaDB (and SingleStore, where it is ignored)."""
    assert Settings.from_env({**ENV, "QUEUE_BATCH_SIZE": "50"}).batch_size == 50
    with pytest.raises(ConfigError, match=r"QUEUE_BATCH_SIZE: must be <= 50 on PostgreSQL"):
        Settings.from_env({**ENV, "QUEUE_BATCH_SIZE": "51"})
    for driver in ("MYSQL", "SINGLE_STORE"):
        env = {**ENV, "DB_DRIVER": driver}
        assert Settings.from_env({**env, "QUEUE_BATCH_SIZE": "200"}).batch_size == 200
        with pytest.raises(ConfigError, match=r"QUEUE_BATCH_SIZE: must be <= 200, got 201"):
            Settings.from_env({**env, "QUEUE_BATCH_SIZE": "201"})
    with pytest.raises(ConfigError, match=r"must be <= 50 on PostgreSQL .*, got 201"):
        Settings.from_env({**ENV, "QUEUE_BATCH_SIZE": "201"})  # PostgreSQL's bound, said alone
    required = dict(db_host="h", db_name="b", db_user="u")
    with pytest.raises(ConfigError, match="on PostgreSQL"):
        Settings(**required, db_driver="postgres", queue_batch_size=100)  # built in code
    assert Settings(**required, db_driver="MYSQL", queue_batch_size=100).batch_size == 100


def executor(cls, database_locks: bool = False, **settings) -> TaskExecutor:
    """An executor that never starts; without ``database_locks`` its liveness locks are not
    the database's (as with CLIENT_SERVER_MODE or QUEUE_COMPAT_1_2_2)."""
    values = dict(db_host="h", db_name="b", db_user="u", queue_name="q", queue_table="public.q")
    store: Any = types.SimpleNamespace(queue_table="public.q")
    extra = {}
    if cls is AsyncTaskExecutor:
        extra = dict(is_async=lambda row: True, handler_connection=None)
    built = cls(
        Settings(**{**values, **settings}),
        store=store,
        pool=object(),
        handler=lambda row, conn: None,
        stop=threading.Event(),
        liveness=DatabaseLiveness(store) if database_locks else object(),
        terminate_session=lambda admin, conn: None,
        **extra,
    )
    if cls is AsyncTaskExecutor:
        built._loop.close()
    return built


@pytest.mark.parametrize(
    "cls, driver, database_locks",
    [
        (TaskExecutor, "SINGLE_STORE", True),  # no savepoints
        (AsyncTaskExecutor, "POSTGRES", True),  # async handlers
        (TaskExecutor, "POSTGRES", False),  # CLIENT_SERVER_MODE or 1.2.2's keys
    ],
)
def test_where_groups_cannot_run_only_an_explicit_batch_size_is_warned_about(
    cls, driver, database_locks, caplog
):
    def drain(**settings):
        return group_drain(executor(cls, database_locks, db_driver=driver, **settings))

    with caplog.at_level(logging.WARNING):
        assert drain() is None
        assert "QUEUE_BATCH_SIZE" not in caplog.text  # the default: no warning
        assert drain(queue_batch_size=1) is None
        assert "QUEUE_BATCH_SIZE" not in caplog.text  # one commit per task, as asked
        assert drain(queue_batch_size=20) is None
    assert "QUEUE_BATCH_SIZE=20 ignored" in caplog.text


def test_synchronous_handlers_on_postgres_group_by_default():
    drain = group_drain(executor(TaskExecutor, True, db_driver="POSTGRES"))
    assert drain is not None and drain.size == DEFAULT_BATCH_SIZE
    assert group_drain(executor(TaskExecutor, True, queue_batch_size=1)) is None


def claim(task_id: int, processo: str = "p") -> Claim:
    row = dict(id=task_id, tentativa=1, dead=False, payload=None, processo=processo)
    return Claim(TaskRecord.from_row(row), True)


def test_isolation_lasts_until_each_suspect_was_claimed_alone():
    isolation = Isolation()
    assert not isolation.active()
    isolation.suspect([1, 2, 3])
    isolation.claimed([claim(7), claim(8)])  # claimed before the isolation began: not counted
    for task_id in (1, 9, 2):
        isolation.claimed([claim(task_id)])
        assert isolation.active()
    isolation.claimed([claim(3)])
    assert not isolation.active()


def test_isolation_ends_after_two_claims_per_suspect_when_others_took_them():
    isolation = Isolation()
    isolation.suspect([1, 2])
    for task_id in range(10, 13):
        isolation.claimed([claim(task_id)])
        assert isolation.active()
    isolation.claimed([claim(13)])
    assert not isolation.active() and isolation.suspects() == frozenset()


def test_pace_expects_a_processo_to_take_what_its_recent_handlers_took():
    pace = Pace()
    slow, fast = claim(1, "slow").task, claim(2, "fast").task
    pace.took(slow, 0.3)
    for _ in range(20):
        pace.took(fast, 0.001)
    assert pace.expected(slow) == pytest.approx(0.3)
    assert pace.expected(fast) == pytest.approx(0.001)
    assert pace.seconds < 0.01  # every handler's: the claim's size follows the many fast ones
    assert pace.expected(claim(3, "new").task) == pace.seconds


def test_a_stopping_worker_waits_for_an_open_group_not_for_one_given_up():
    from nsj_queue_lib.runtime.group_commit import _Group

    ex = executor(TaskExecutor, True, db_driver="POSTGRES")
    ex.group = group_drain(ex)
    assert ex.wait_idle(0.01)
    group = _Group([claim(1)])  # its handler returned, its commit still to come
    ex.group._groups[1] = group
    assert not ex.wait_idle(0.05)
    group.abandoned = True  # given up after its timeout: settled elsewhere
    assert ex.wait_idle(0.01)
