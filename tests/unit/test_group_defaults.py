"""Group commit's defaults: the batch size, where it applies without a word, and the
isolation after a failed group commit (runtime/group_isolation.py, group_pace.py)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.observability.observer import NULL_OBSERVER
from nsj_queue_lib.process.batch import ProcessBatch
from nsj_queue_lib.runtime.commit_group import CommitGroup
from nsj_queue_lib.runtime.group_isolation import Isolation
from nsj_queue_lib.runtime.group_pace import Pace
from nsj_queue_lib.runtime.plan import DrainPlan, plan_drain
from nsj_queue_lib.runtime.running import RunningTasks
from nsj_queue_lib.runtime.tokens import WakeTokens
from nsj_queue_lib.runtime.worker_parts import WorkerParts
from nsj_queue_lib.settings import DEFAULT_BATCH_SIZE, Settings
from tests.unit.test_executor_step_back_loop import group_drain_without_a_database

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


def plan(group_statements: bool, asynchronous: bool, locks_in_database: bool, **settings):
    values = dict(db_host="h", db_name="b", db_user="u", queue_name="q", queue_table="public.q")
    return plan_drain(
        Settings(**{**values, **settings}),
        group_commit_by_default=True,
        group_statements=group_statements,
        asynchronous=asynchronous,
        locks_in_database=locks_in_database,
    )


@pytest.mark.parametrize(
    "group_statements, asynchronous, locks_in_database",
    [
        (False, False, True),  # SingleStore: no savepoints
        (True, True, True),  # async handlers
        (True, False, False),  # CLIENT_SERVER_MODE or 1.2.2's keys
    ],
)
def test_where_groups_cannot_run_only_an_explicit_batch_size_is_ignored_aloud(
    group_statements, asynchronous, locks_in_database
):
    def drain(**settings):
        return plan(group_statements, asynchronous, locks_in_database, **settings)

    assert drain() == DrainPlan(asynchronous, False, None)  # the default: no warning
    assert drain(queue_batch_size=1) == DrainPlan(asynchronous, False, None)  # as asked
    assert drain(queue_batch_size=20) == DrainPlan(asynchronous, False, 20)


def test_an_ignored_batch_size_is_logged_once_planned(caplog):
    settings = Settings(
        db_host="h",
        db_name="b",
        db_user="u",
        queue_name="q",
        queue_table="public.q",
        queue_batch_size=20,
    )
    driver = make_driver(settings)
    parts = WorkerParts(
        settings,
        driver,
        driver.store(),
        None,
        threading.Event(),  # type: ignore[arg-type]
        None,
        NULL_OBSERVER,
        None,
        None,
        None,
        None,  # type: ignore[arg-type]
    )
    with caplog.at_level(logging.WARNING):
        assert not parts.drain_plan(asynchronous=True, legacy=None).group_commit
    assert "QUEUE_BATCH_SIZE=20 ignored" in caplog.text


def test_synchronous_handlers_group_by_default_where_the_database_says_so():
    assert plan(True, False, True) == DrainPlan(False, True)
    assert plan(True, False, True, queue_batch_size=1) == DrainPlan(False, False)
    values = dict(db_host="h", db_name="b", db_user="u", queue_name="q", queue_table="public.q")
    elsewhere = plan_drain(
        Settings(**values),
        group_commit_by_default=False,
        group_statements=True,
        asynchronous=False,
        locks_in_database=True,
    )
    assert elsewhere == DrainPlan(False, False)  # MySQL/MariaDB: only when asked for


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


def test_a_groups_read_of_its_processes_is_told_apart_from_the_handlers_time():
    """The group's first process task reads every process of the group (one statement):
    the drain subtracts that read from the handler's time before the pace sees it."""

    class SlowStore:
        def load_for_tasks(self, conn, task_ids):
            time.sleep(0.03)
            return {task_id: {"task_id": task_id} for task_id in task_ids}

    peers = [{"id": 8, "id_inicial": None, "lock_key": "process:b"}]
    batch = ProcessBatch(lambda: peers)
    assert batch.load(SlowStore(), None, 7) == {"task_id": 7}
    assert 0.03 <= batch.take_load_seconds() < 1
    assert batch.take_load_seconds() == 0.0  # taken once
    assert batch.load(SlowStore(), None, 8) == {"task_id": 8}  # read with the first
    assert batch.take_load_seconds() == 0.0


def test_a_stopping_worker_waits_for_an_open_group_not_for_one_given_up():
    stop = threading.Event()
    running = RunningTasks()
    drain = group_drain_without_a_database(running, WakeTokens(1, stop), stop)
    assert running.wait_idle(0.01, drain.open)
    group = CommitGroup([claim(1)])  # its handler returned, its commit still to come
    drain._groups[1] = group
    assert not running.wait_idle(0.05, drain.open)
    group.abandoned = True  # given up after its timeout: settled elsewhere
    assert running.wait_idle(0.01, drain.open)
