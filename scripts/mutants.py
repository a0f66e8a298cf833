#!/usr/bin/env python3
"""Plant one-line bugs, one at a time, and check that the tests notice (``make mutants``).

Each mutant below replaces one exact piece of text in one file of a scratch
copy of the tree, runs the tests that must catch it, and puts the text back.
A mutant is *caught* when those tests fail, and *survived* when they pass:
then a behaviour the queue promises has no test that fails when it breaks.

The original text must occur exactly once in its file, and every test named
must be defined in its file; when code or tests move, the run stops before
anything is copied and names the mutants to fix (``--check`` does only that,
in a second; the parameters of a node id are only seen by pytest). SQL files count too: the tests create their
queues from the DDL in ``nsj_queue_lib/db``, so a mutated DDL file is what
they run against. The DDL golden files would notice any such change, which
proves nothing about behaviour, so they are never listed as catchers.

Before the mutants, the union of their tests runs once on the unmodified copy
and must pass (``--no-baseline`` skips it): a test that fails anyway would
count every mutant it is listed for as caught.

Tests run with ``CI=true``, so a database that is missing fails the baseline
instead of skipping tests (a skipped catcher would let a mutant survive
unseen). Point ``TEST_PG_DSN`` and ``TEST_MYSQL_DSN`` at the test databases as
for ``make test``. Not part of CI: run it before closing an issue that
changes the claim, the runtime or the SQL, and add the mutants of every new
capability here.

    scripts/mutants.py                  every mutant
    scripts/mutants.py -k purge -k skip  the mutants whose name contains one of these
    scripts/mutants.py --dialect mysql   the mutants whose catchers need MariaDB
    scripts/mutants.py --list            what would run
    scripts/mutants.py --jobs 2          two scratch copies side by side

Standard library only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What the scratch copy leaves out: environments, caches, build output.
COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "*.egg-info",
    "build",
    "dist",
    ".demo",
)
DIALECTS = ("postgres", "mysql", "server")
# pytest-timeout per test: a mutant that makes a test hang fails it instead.
TEST_TIMEOUT = 90
# The whole run of one mutant's tests, as a last resort.
RUN_TIMEOUT = 900


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to the repository root
    original: str  # occurs exactly once in ``file``
    replacement: str
    tests: tuple[str, ...]  # pytest node ids (or files) that must fail
    dialects: tuple[str, ...]  # what the catchers run against: postgres, mysql, server
    breaks: str  # the behaviour that breaks, in a few words


# -- the mutants ------------------------------------------------------------------------

PG_QUERIES = "nsj_queue_lib/db/postgres/queries.sql"
# The claim function's claim statement (claim_function.sql runs it, window first).
PG_CLAIM_FUNCTION = "nsj_queue_lib/db/postgres/claim_query.sql"
PG_STORE = "nsj_queue_lib/db/postgres/store.py"
PG_DRIVER = "nsj_queue_lib/db/postgres/driver.py"
MY_QUERIES = "nsj_queue_lib/db/mysql/queries.sql"
MY_PROCEDURE = "nsj_queue_lib/db/mysql/claim_procedure.sql"
MY_STORE = "nsj_queue_lib/db/mysql/store.py"
MY_DRIVER = "nsj_queue_lib/db/mysql/driver.py"
SS_QUERIES = "nsj_queue_lib/db/singlestore/queries.sql"
ATTEMPT = "nsj_queue_lib/runtime/attempt.py"
FAILURES = "nsj_queue_lib/runtime/failures.py"
RELEASE = "nsj_queue_lib/runtime/release.py"
DRAIN_GROUP = "nsj_queue_lib/runtime/drain_group.py"
WORKER_RUNTIME = "nsj_queue_lib/runtime/worker_runtime.py"
PG_SESSION = "nsj_queue_lib/db/postgres/session.py"
TASK_SESSION = "nsj_queue_lib/db/task_session.py"

GUARDS_PG = "tests/integration/test_guards_pg.py"
GUARDS_MY = "tests/integration/test_guards_mysql.py"
GUARDS_SERVER = "tests/integration/test_guards_server.py"
DEPENDENCIES_TEST = "tests/integration/store/test_store_dependencies.py"
GUARDS_SHUTDOWN = "tests/contract/test_guards_shutdown.py"
CONTRACT = "tests/contract/test_contract.py"
GROUP_COMMIT = "tests/contract/test_group_commit.py"
EXACTLY_ONCE = "tests/contract/test_exactly_once.py"
POLICIES = "tests/contract/test_task_policies.py"
RUNTIME = "tests/integration/test_runtime_execution.py"
SERVICES = "tests/integration/test_runtime_services.py"
LOGS = "tests/integration/test_runtime_logs.py"
OPERATE = "tests/contract/test_operate.py"
STORE_CLAIM = "tests/integration/store/test_store_claim.py"
STORE_CLAIM_SETS = "tests/integration/store/test_store_claim_sets.py"
STORE_CLIENT = "tests/integration/store/test_store_client.py"
STORE_MAINTENANCE = "tests/integration/store/test_store_maintenance.py"
STORE_SETTLE = "tests/integration/store/test_store_settle.py"
STORE_LIFECYCLE = "tests/integration/store/test_store_lifecycle.py"
MY_STORE_ONLY = "tests/integration/store/test_store_mysql_only.py"
LIFECYCLE = "tests/contract/test_lifecycle.py"

PG_SKIP_TEST = f"{GUARDS_PG}::test_a_claim_passes_a_ready_row_another_session_holds_without_waiting"
BIND_MISSING = f"{STORE_CLAIM}::test_bind_refuses_a_missing_claim_routine"
BIND_OTHER_VERSION = f"{STORE_CLAIM}::test_bind_refuses_a_claim_routine_of_another_version"
THREAD_DIES = f"{RUNTIME}::test_a_thread_that_dies_stops_the_worker_with_exit_code_3_naming_it"
STORE_PURGE = f"{STORE_MAINTENANCE}::test_purge_is_bounded_and_never_touches_active_rows"
MY_HELD_THEN_FUTURE = (
    f"{GUARDS_MY}::test_a_claim_passing_a_held_ready_row_never_reaches_a_task_not_yet_due"
)
MY_ORDER_TEST = f"{GUARDS_MY}::test_one_executor_drains_by_priority_then_age"
MY_PURGE_TEST = f"{GUARDS_MY}::test_an_old_pending_task_takes_no_place_in_a_purge_round"
# The parameters of the MySQL claim guards: the claim procedure, and the claim
# of a worker whose liveness locks live in the socket server (claim_uncommitted).
PROCEDURE, WITHOUT_LOCKS = "[claim procedure]", "[claim without locks]"


POOLER = "tests/acceptance/test_pooler.py"


def _contract(test: str, *backends: str) -> tuple[str, ...]:
    return tuple(f"{CONTRACT}::{test}[{backend}]" for backend in backends)


def _policies(test: str, *backends: str) -> tuple[str, ...]:
    return tuple(f"{POLICIES}::{test}[{backend}]" for backend in backends)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "pg-claim-function-releases-children",
        "nsj_queue_lib/db/postgres/claim_function.sql",
        "            PERFORM {release_function}(ARRAY[done_first]);",
        "            NULL;",
        (f"{DEPENDENCIES_TEST}::test_the_claim_routines_completion_releases_the_child",),
        ("postgres",),
        "a task's success leaves its waiting children waiting",
    ),
    Mutant(
        "mysql-procedure-releases-children",
        MY_PROCEDURE,
        "            CALL {release_function}(v_done_first);",
        "            DO 0;",
        (f"{DEPENDENCIES_TEST}::test_the_claim_routines_completion_releases_the_child",),
        ("mysql",),
        "the claim procedure's completion leaves the waiting children waiting",
    ),
    Mutant(
        "mysql-outside-completion-releases-children",
        "nsj_queue_lib/db/mysql/family_store.py",
        "            dependencies.after_successes(self, conn, [task_id], [first_id] if first_id else None)",
        "            pass",
        (f"{DEPENDENCIES_TEST}::test_the_claim_routines_completion_releases_the_child",),
        ("mysql",),
        "a completion without a next claim leaves the waiting children waiting",
    ),
    # -- issue 22: the seven gaps ---------------------------------------------------------
    Mutant(
        "pg-claim-uncommitted-skip-locked",
        PG_QUERIES,
        "    LIMIT 1\n    FOR UPDATE SKIP LOCKED\n), claimed AS (",
        "    LIMIT 1\n    FOR UPDATE\n), claimed AS (",
        (f"{PG_SKIP_TEST}[client/server claim]",),
        ("postgres",),
        "the client/server-mode claim waits on a row another session holds",
    ),
    Mutant(
        "pg-claim-function-skip-locked",
        PG_CLAIM_FUNCTION,
        "    FOR UPDATE SKIP LOCKED\n",
        "    FOR UPDATE\n",
        (f"{PG_SKIP_TEST}[first claim]", f"{PG_SKIP_TEST}[after a completion]"),
        ("postgres",),
        "the claim function waits on a held row",
    ),
    Mutant(
        "server-retry-second-look",
        "nsj_queue_lib/runtime/retry.py",
        "orphans = [t for t in free if t.id in suspects]",
        "orphans = [t for t in candidates if t.id in suspects]",
        (
            f"{GUARDS_SERVER}::"
            "test_a_task_whose_server_lock_is_taken_again_during_the_grace_period_is_not_rescued",
        ),
        ("postgres", "server"),
        "client/server rescue ignores a lock taken again during the grace period",
    ),
    Mutant(
        "shutdown-ends-the-handlers-session",
        RELEASE,
        "                terminate_session(admin, item.conn)\n",
        "                pass\n",
        (f"{GUARDS_SHUTDOWN}::test_a_handler_finishing_after_the_grace_period_commits_nothing",),
        ("postgres", "mysql", "server"),
        "a handler released at shutdown still commits its writes",
    ),
    Mutant(
        "mysql-purge-select-pendente",
        MY_QUERIES,
        "  AND o.status NOT IN ('pendente', 'agendada', 'processando')",
        "  AND o.status NOT IN ('agendada', 'processando')",
        (MY_PURGE_TEST,),
        ("mysql",),
        "the purge selects old 'pendente' rows",
    ),
    Mutant(
        "mysql-purge-delete-recheck",
        MY_QUERIES,
        "WHERE id IN %(ids)s\n  AND status NOT IN ('pendente', 'agendada', 'processando')",
        "WHERE id IN %(ids)s\n  AND status NOT IN ('agendada', 'processando')",
        (
            f"{GUARDS_MY}::"
            "test_a_row_put_back_to_pendente_after_the_purge_selected_it_is_not_deleted",
        ),
        ("mysql",),
        "the purge deletes a row that became 'pendente' after its select",
    ),
    Mutant(
        "mysql-procedure-fallback-liveness-lock",
        MY_PROCEDURE,
        "\n                   JSON_OBJECT('liveness_locked', GET_LOCK(CONCAT(p_lock_prefix, t.id), 0),",
        "\n                   JSON_OBJECT('liveness_locked', 1,",
        (f"{GUARDS_MY}::test_a_claim_without_the_claim_index_takes_the_liveness_lock",),
        ("mysql",),
        "a claim without the claim index takes no liveness lock",
    ),
    Mutant(
        "mysql-orphans-lock-recheck",
        MY_QUERIES,
        "  AND (NOT %(check_db_locks)s OR IS_USED_LOCK(CONCAT(%(lock_prefix)s, t.id)) IS NULL)\n"
        "ORDER BY t.id\n",
        "ORDER BY t.id\n",
        (
            f"{GUARDS_MY}::"
            "test_an_orphan_whose_lock_is_taken_after_the_candidates_step_is_not_rescued",
        ),
        ("mysql",),
        "the rescue locks a task whose liveness lock was taken after the candidates step",
    ),
    Mutant(
        "server-refused-hello-return",
        "nsj_queue_lib/server/loop.py",
        '                self._refuse(conn, "unauthorized", "authentication failed", rid)\n'
        "                return\n",
        '                self._refuse(conn, "unauthorized", "authentication failed", rid)\n',
        (
            f"{GUARDS_SERVER}::"
            "test_a_client_refused_at_hello_gets_nothing_more_and_is_never_authenticated",
        ),
        ("server",),
        "a client refused at hello goes on to be authenticated",
    ),
    # -- the driver seam: the claim routine checked at start, supervised threads -----------------
    Mutant(
        "claim-routine-any-version",
        "nsj_queue_lib/db/dialect.py",
        "    if found in accepted:\n        return\n",
        "    if found is not None:\n        return\n",
        (f"{BIND_OTHER_VERSION}[postgres]", f"{BIND_OTHER_VERSION}[mysql]"),
        ("postgres", "mysql"),
        "a worker starts on a claim routine of another version",
    ),
    Mutant(
        "pg-bind-checks-the-claim-function",
        PG_STORE,
        "check_claim_routine_version(self.claim_function, found, claim_function_version())",
        "check_claim_routine_version(self.claim_function, found, found)",
        (f"{BIND_MISSING}[postgres]", f"{BIND_OTHER_VERSION}[postgres]"),
        ("postgres",),
        "a worker starts without the claim function, or on one of another version",
    ),
    Mutant(
        "mysql-bind-checks-the-claim-procedure",
        MY_STORE,
        "check_claim_routine_version(self.claim_procedure, found, claim_procedure_versions())",
        "check_claim_routine_version(self.claim_procedure, found, found)",
        (f"{BIND_MISSING}[mysql]", f"{BIND_OTHER_VERSION}[mysql]"),
        ("mysql",),
        "a worker starts without the claim procedure, or on one of another version",
    ),
    Mutant(
        "supervisor-sees-a-dead-service",
        WORKER_RUNTIME,
        "dead = [t for t in threads if not t.is_alive()] + executor.dead_threads()",
        "dead = executor.dead_threads()",
        (f"{THREAD_DIES}[service]", f"{THREAD_DIES}[dispatcher]"),
        ("postgres",),
        "a worker whose dispatcher or service thread died runs on without it",
    ),
    Mutant(
        "supervisor-sees-a-dead-executor-thread",
        WORKER_RUNTIME,
        "dead = [t for t in threads if not t.is_alive()] + executor.dead_threads()",
        "dead = [t for t in threads if not t.is_alive()]",
        (f"{THREAD_DIES}[executor]",),
        ("postgres",),
        "a worker whose executor thread died runs on without it",
    ),
    Mutant(
        "group-stops-on-a-crashed-runtime",
        "nsj_queue_lib/worker_group.py",
        "            code = EXIT_WORKER_DIED\n",
        "            return\n",
        (
            "tests/contract/test_worker_group.py::"
            "test_a_crashed_runtime_stops_the_other_queues_gracefully_and_the_process_exits_3"
            "[postgres]",
        ),
        ("postgres",),
        "a queue of a WorkerGroup whose runtime crashed leaves the others running (exit 0 later)",
    ),
    Mutant(
        "singlestore-claim-is-conditional",
        SS_QUERIES,
        "WHERE id = %(id)s AND status = 'pendente';",
        "WHERE id = %(id)s;",
        (
            f"{GUARDS_MY}::"
            "test_a_singlestore_claim_never_takes_a_row_that_changed_after_it_was_read",
        ),
        ("mysql",),
        "SingleStore's claim takes a row another worker claimed after it was read",
    ),
    # -- priority order -----------------------------------------------------------------
    Mutant(
        "pg-claim-uncommitted-priority-order",
        PG_QUERIES,
        "    ORDER BY t.prioridade DESC, t.data_hora, t.id\n    LIMIT 1\n",
        "    ORDER BY t.data_hora, t.id\n    LIMIT 1\n",
        _contract("test_ready_tasks_run_by_priority_then_age", "postgres-via-server"),
        ("postgres", "server"),
        "the client/server-mode claim ignores prioridade",
    ),
    Mutant(
        "pg-claim-function-priority-order",
        PG_CLAIM_FUNCTION,
        "    ORDER BY q.prioridade DESC, q.data_hora, q.id",
        "    ORDER BY q.data_hora, q.id",
        (
            *_contract("test_ready_tasks_run_by_priority_then_age", "postgres"),
            "tests/integration/store/test_store_claim_window.py::"
            "test_after_the_first_rows_prioridade_the_lower_ones_are_claimed_in_prioridade_order"
            "[postgres]",
        ),
        ("postgres",),
        "the claim function ignores prioridade",
    ),
    Mutant(
        "mysql-claim-uncommitted-priority-order",
        MY_QUERIES,
        "ORDER BY t.prioridade DESC, t.data_hora, t.id\nLIMIT 1\n",
        "ORDER BY t.data_hora, t.id\nLIMIT 1\n",
        (f"{MY_ORDER_TEST}{WITHOUT_LOCKS}",),
        ("mysql",),
        "the client/server-mode claim ignores prioridade",
    ),
    Mutant(
        "mysql-procedure-priority-order",
        MY_PROCEDURE,
        "                ORDER BY t.prioridade DESC, t.data_hora, t.id\n                LIMIT 1;",
        "                ORDER BY t.data_hora, t.id\n                LIMIT 1;",
        (f"{MY_ORDER_TEST}{PROCEDURE}",),
        ("mysql",),
        "the claim procedure's look-up ignores prioridade",
    ),
    Mutant(
        "singlestore-claim-priority-order",
        SS_QUERIES,
        "ORDER BY t.prioridade DESC, t.data_hora, t.id\nLIMIT %(limit)s;",
        "ORDER BY t.data_hora, t.id\nLIMIT %(limit)s;",
        _contract("test_ready_tasks_run_by_priority_then_age", "singlestore-via-server"),
        ("mysql", "server"),
        "SingleStore's claim ignores prioridade",
    ),
    # -- due time -------------------------------------------------------------------------
    Mutant(
        "pg-claim-uncommitted-due-time",
        PG_QUERIES,
        "WHERE {hot_t}t.status = 'pendente' AND t.data_hora <= clock_timestamp() AND {lock_key_free}\n",
        "WHERE {hot_t}t.status = 'pendente' AND {lock_key_free}\n",
        _contract(
            "test_a_task_never_runs_before_its_data_hora_and_runs_when_due", "postgres-via-server"
        ),
        ("postgres", "server"),
        "the client/server-mode claim takes a task before its data_hora",
    ),
    Mutant(
        "pg-claim-function-due-time",
        PG_CLAIM_FUNCTION,
        "WHERE {hot_q}q.status = 'pendente' AND q.data_hora <= clock_timestamp()",
        "WHERE {hot_q}q.status = 'pendente'",
        _contract("test_a_task_never_runs_before_its_data_hora_and_runs_when_due", "postgres"),
        ("postgres",),
        "the claim function takes a task before its data_hora",
    ),
    Mutant(
        "mysql-claim-uncommitted-due-time",
        MY_QUERIES,
        "WHERE {hot_t}t.status = 'pendente' AND t.data_hora <= NOW(6) AND {lock_key_free}\n"
        "  AND {deliverable}\n  AND {limits_free}\nORDER BY t.prioridade DESC, t.data_hora, t.id\nLIMIT 1\n",
        "WHERE {hot_t}t.status = 'pendente' AND {lock_key_free}\n"
        "  AND {deliverable}\n  AND {limits_free}\nORDER BY t.prioridade DESC, t.data_hora, t.id\nLIMIT 1\n",
        (f"{MY_HELD_THEN_FUTURE}{WITHOUT_LOCKS}",),
        ("mysql",),
        "the client/server-mode claim takes a task before its data_hora",
    ),
    Mutant(
        "mysql-procedure-due-time",
        "nsj_queue_lib/db/mysql/claim_where.py",
        "_READY = \"t.status = 'pendente' AND t.data_hora <= {now}\"\n",
        "_READY = \"t.status = 'pendente'\"\n",
        (
            f"{MY_HELD_THEN_FUTURE}{PROCEDURE}",
            f"{MY_STORE_ONLY}::test_a_batch_claim_takes_ready_tasks_in_claim_order_in_one_commit",
        ),
        ("mysql",),
        "the claim procedure (one by one, and its set-based batch) takes a task before its"
        " data_hora",
    ),
    # -- retry delay and dead letter ------------------------------------------------------
    Mutant(
        "retry-delay-grows-with-tentativa",
        "nsj_queue_lib/retry_policy.py",
        "            delay = tentativa * self.base_s\n",
        "            delay = self.base_s\n",
        (f"{RUNTIME}::test_failures_retry_with_back_off_then_dead_letter",),
        ("postgres",),
        "every retry waits one base interval",
    ),
    Mutant(
        "pg-retry-delay",
        PG_QUERIES,
        "proxima_tentativa = clock_timestamp() + make_interval(secs => %(delay_seconds)s)",
        "proxima_tentativa = clock_timestamp()",
        _contract("test_a_failure_rolls_back_and_schedules_the_next_attempt", "postgres"),
        ("postgres",),
        "a retry is due at once",
    ),
    Mutant(
        "mysql-retry-delay",
        MY_QUERIES,
        "proxima_tentativa = NOW(6) + INTERVAL %(delay_us)s MICROSECOND",
        "proxima_tentativa = NOW(6)",
        _contract("test_a_failure_rolls_back_and_schedules_the_next_attempt", "mysql"),
        ("mysql",),
        "a retry is due at once",
    ),
    Mutant(
        "dead-letter-after-the-last-attempt",
        "nsj_queue_lib/retry_policy.py",
        "        if tentativa >= self.max_retry:\n",
        "        if tentativa > self.max_retry:\n",
        _contract("test_dead_letter_after_queue_max_retry", "postgres", "mysql"),
        ("postgres", "mysql"),
        "one attempt more than QUEUE_MAX_RETRY",
    ),
    Mutant(
        "pg-dead-letter-is-dead",
        PG_QUERIES,
        "f.publication_id, f.subscriber_id, true,\n    coalesce(f.id_inicial, f.id), f.prioridade, due.at",
        "f.publication_id, f.subscriber_id, false,\n    coalesce(f.id_inicial, f.id), f.prioridade, due.at",
        _contract("test_dead_letter_after_queue_max_retry", "postgres"),
        ("postgres",),
        "the dead letter goes to execute, not execute_dead",
    ),
    Mutant(
        "mysql-dead-letter-is-dead",
        MY_QUERIES,
        "f.publication_id, f.subscriber_id, true,\n    COALESCE(f.id_inicial, f.id), f.prioridade,",
        "f.publication_id, f.subscriber_id, false,\n    COALESCE(f.id_inicial, f.id), f.prioridade,",
        _contract("test_dead_letter_after_queue_max_retry", "mysql"),
        ("mysql",),
        "the dead letter goes to execute, not execute_dead",
    ),
    # -- rollback of a failed handler -------------------------------------------------------
    Mutant(
        "failed-handler-rolls-back",
        TASK_SESSION,
        "        self.store.rollback_and_begin(conn)\n        self.record_failure(conn, task, record)\n",
        "        self.store.begin(conn)\n        self.record_failure(conn, task, record)\n",
        _contract("test_a_failure_rolls_back_and_schedules_the_next_attempt", "postgres", "mysql"),
        ("postgres", "mysql"),
        "a failed handler's writes commit with its failure",
    ),
    Mutant(
        "pg-group-failed-handler-rolls-back",
        PG_SESSION,
        '        self._exec(conn, _ROLLBACK_TO, "rollback to savepoint")\n',
        "        pass\n",
        (
            f"{GROUP_COMMIT}::test_a_failing_handler_is_rolled_back_alone_and_the_group_commits_once[postgres]",
        ),
        ("postgres",),
        "a failed handler's writes commit with its group",
    ),
    # -- issue 39: the vacuum service ------------------------------------------------------
    Mutant(
        "vacuum-at-any-count",
        "nsj_queue_lib/runtime/vacuum.py",
        "        vacuum = health.dead_rows >= threshold\n",
        "        vacuum = True\n",
        (
            "tests/integration/test_runtime_services.py::"
            "test_vacuum_service_vacuums_the_queue_table_past_its_dead_rows",
        ),
        ("postgres",),
        "every worker minute vacuums the queue table, dead rows or not",
    ),
    # -- issue 38: the executor cut into its parts; what moved keeps its catchers ----------
    Mutant(
        "a-signal-handler-sets-the-stop-event-itself",
        "nsj_queue_lib/runtime/signals.py",
        "        self._waker.wake()  # a write(2): no lock, whatever the main thread holds\n",
        "        self._stop()\n",
        (
            "tests/unit/test_signal_stop.py::"
            "test_a_signal_while_the_main_thread_holds_the_stop_event_s_lock_stops_the_worker",
        ),
        ("postgres",),
        "SIGTERM at the wrong instant deadlocks the worker: it never stops",
    ),
    Mutant(
        "server-completion-unfenced",
        TASK_SESSION,
        "        if self.store.complete_if_running(conn, task_id, mensagem, first_id):\n",
        "        if self.store.complete_if_running(conn, task_id, mensagem, first_id) or True:\n",
        (
            f"{STORE_SETTLE}::test_a_completion_under_an_outside_lock_is_fenced_with_its_writes"
            "[mysql]",
        ),
        ("mysql",),
        "a rescued task's handler writes commit under the socket server's lost lock",
    ),
    Mutant(
        "a-group-gives-back-a-cancelled-task",
        TASK_SESSION,
        "        if self.store.cancel_if_requested(conn, task.id, cancel_mensagem):\n",
        "        if False:\n",
        (
            "tests/contract/test_group_commit_review.py::"
            "test_a_cancelled_task_the_group_gives_back_unstarted_ends_cancelled",
        ),
        ("postgres", "mysql"),
        "a task cancelled while its group held it starts again elsewhere",
    ),
    Mutant(
        "a-lost-group-runs-its-committed-tasks-again",
        TASK_SESSION,
        "                    if committed is True and status == model.PROCESSANDO:\n",
        "                    if False:\n",
        (
            "tests/contract/test_group_commit_review.py::"
            "test_a_handler_that_commits_then_raises_does_not_run_the_earlier_tasks_again",
        ),
        ("postgres", "mysql"),
        "tasks whose writes a handler's commit kept go back to the queue and run twice",
    ),
    Mutant(
        "stop-forgets-claimed-unstarted-tasks",
        "nsj_queue_lib/runtime/running.py",
        "            while self._running or self._drains_in_flight() or groups_open():\n",
        "            while self._running or groups_open():\n",
        (
            "tests/contract/test_stop_waits_for_claims.py::"
            "test_stop_waits_for_a_claimed_task_whose_handler_has_not_started"
            "[one commit per task-postgres]",
        ),
        ("postgres",),
        # (A commit group holding the claim is waited for as an open group.)
        "a stopping worker exits with claimed tasks left to the retry service",
    ),
    Mutant(
        "a-timed-out-attempt-succeeds",
        ATTEMPT,
        "        if item.context.stop_reason == TIMED_OUT:\n",
        "        if False:\n",
        (
            f"{LIFECYCLE}::test_a_hung_handler_is_timed_out_and_retried_while_the_others_drain"
            "[postgres]",
        ),
        ("postgres",),
        "an attempt that ran past its timeout commits as a success",
    ),
    Mutant(
        "group-step-back-never-claims-again",
        DRAIN_GROUP,
        "        return not self.stop.is_set() and not self.steps.claimed_since(stepped_back)\n",
        "        return False\n",
        (
            f"{GROUP_COMMIT}::"
            "test_an_executor_stepping_back_leaves_no_freed_key_waiting_for_a_slow_handler[postgres]",
        ),
        ("postgres",),
        "a stepped-back executor leaves the keys it freed to a slow handler's executor",
    ),
    Mutant(
        "pg-claim-running-keys-set",
        "nsj_queue_lib/db/postgres/claim_sets.py",
        "\" WHERE {held_hot}held.lock_key IS NOT NULL AND held.status = 'processando'\"",
        "\" WHERE {held_hot}held.lock_key IS NOT NULL AND held.status = 'sucesso'\"",
        (
            f"{STORE_CLAIM_SETS}::"
            "test_with_hundreds_of_keys_running_only_the_idle_keys_heads_are_claimed[postgres]",
        ),
        ("postgres",),
        "the claim takes a task whose lock_key is running",
    ),
    Mutant(
        "mysql-claim-running-key-status",
        "nsj_queue_lib/db/mysql/lock_keys.py",
        "AND held.lock_key_status = 'processando' LIMIT 1",
        "AND held.lock_key_status = 'sucesso' LIMIT 1",
        (
            "tests/contract/test_lock_key.py::test_tasks_of_a_key_never_overlap_and_start_in_claim_order[mysql]",
        ),
        ("mysql",),
        "two tasks of one lock_key run at the same time on MariaDB",
    ),
    Mutant(
        "mysql-group-end-one-message",
        "nsj_queue_lib/db/mysql/successes.py",
        "    if len(distinct) == 1:\n",
        "    if True:\n",
        (
            "tests/integration/test_group_end_mysql.py::test_different_messages_each_reach_their_task",
        ),
        ("mysql",),
        "a MariaDB group writes one task's mensagem on every task",
    ),
    Mutant(
        "mysql-batch-rows-ignore-foreign-locks",
        MY_PROCEDURE,
        "IF(v_needs_read = 0 AND v_locked = v_count,",
        "IF(v_needs_read = 0,",
        (
            f"{MY_STORE_ONLY}::test_a_batch_claims_tasks_as_the_rows_a_plain_select_reads"
            "[mysql-read_again]",
        ),
        ("mysql",),
        "a MariaDB batch reports a liveness lock held elsewhere as its own",
    ),
    Mutant(
        "mysql-batch-rows-later-attempt-payload",
        MY_PROCEDURE,
        "\n                               OR (t.payload IS NULL AND t.id_inicial IS NOT NULL) AS needs_read",
        "\n                               AS needs_read",
        (
            f"{MY_STORE_ONLY}::test_a_batch_claims_tasks_as_the_rows_a_plain_select_reads[mysql-as_read]",
        ),
        ("mysql",),
        "a later attempt claimed in a MariaDB batch runs without its first attempt's payload",
    ),
    Mutant(
        "mysql-batch-rows-chunk-kept",
        MY_PROCEDURE,
        "OR LENGTH(@nsjq_claimed_chunk := '') > 0))",
        "OR FALSE))",
        (
            f"{MY_STORE_ONLY}::"
            "test_a_batch_of_the_largest_size_is_claimed_as_read_in_claim_order[mysql]",
        ),
        ("mysql",),
        "a MariaDB batch past 32 KiB of text appends its rows more than once",
    ),
    # -- liveness lock on claim ---------------------------------------------------------------
    Mutant(
        "pg-claim-function-liveness-lock",
        PG_CLAIM_FUNCTION,
        "pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4) AS claimed_lock\n",
        "true AS claimed_lock\n",
        (f"{PG_SKIP_TEST}[first claim]", f"{PG_SKIP_TEST}[after a completion]"),
        ("postgres",),
        "the claim function takes no liveness lock",
    ),
    Mutant(
        "mysql-procedure-liveness-lock",
        MY_PROCEDURE,
        "\n                       JSON_OBJECT('liveness_locked', GET_LOCK(CONCAT(p_lock_prefix, t.id), 0),",
        "\n                       JSON_OBJECT('liveness_locked', 1,",
        (f"{MY_ORDER_TEST}{PROCEDURE}",),
        ("mysql",),
        "the claim procedure takes no liveness lock",
    ),
    # -- SKIP LOCKED on MariaDB ---------------------------------------------------------------
    Mutant(
        "mysql-claim-uncommitted-skip-locked",
        MY_QUERIES,
        "LIMIT 1\nFOR UPDATE SKIP LOCKED;\n-- step: mark",
        "LIMIT 1\nFOR UPDATE;\n-- step: mark",
        (f"{MY_HELD_THEN_FUTURE}{WITHOUT_LOCKS}",),
        ("mysql",),
        "the client/server-mode claim waits on a held row",
    ),
    Mutant(
        "mysql-procedure-skip-locked",
        MY_PROCEDURE,
        "\n                LIMIT 1\n                FOR UPDATE SKIP LOCKED;",
        "\n                LIMIT 1\n                FOR UPDATE;",
        (f"{MY_HELD_THEN_FUTURE}{PROCEDURE}",),
        ("mysql",),
        "the claim procedure waits on a held row",
    ),
    # -- crash recovery -------------------------------------------------------------------------
    Mutant(
        "pg-orphans-need-a-free-liveness-lock",
        PG_QUERIES,
        "  AND (NOT %(check_db_locks)s::boolean OR NOT EXISTS (",
        "  AND (true OR NOT EXISTS (",
        (
            f"{STORE_SETTLE}::test_a_killed_worker_leaves_an_orphan[postgres]",
            f"{SERVICES}::test_retry_service_rescues_only_attempts_without_a_liveness_lock",
        ),
        ("postgres",),
        "the retry service rescues tasks whose worker is alive",
    ),
    Mutant(
        "pg-shutdown-terminates-the-backend",
        PG_DRIVER,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
        "SELECT pid FROM pg_stat_activity",
        (
            f"{GUARDS_SHUTDOWN}::"
            "test_a_handler_finishing_after_the_grace_period_commits_nothing[postgres]",
        ),
        ("postgres",),
        "ending a session at shutdown leaves it running",
    ),
    Mutant(
        "mysql-shutdown-kills-the-connection",
        MY_DRIVER,
        'cur.execute("KILL CONNECTION %s", (int(victim_conn.thread_id()),))',
        'cur.execute("DO %s", (int(victim_conn.thread_id()),))',
        (
            f"{GUARDS_SHUTDOWN}::test_a_handler_finishing_after_the_grace_period_commits_nothing[mysql]",
        ),
        ("mysql",),
        "ending a session at shutdown leaves it running",
    ),
    # -- purge filters ------------------------------------------------------------------------
    Mutant(
        "pg-purge-keeps-pendente",
        PG_QUERIES,
        "      AND o.status NOT IN ('pendente', 'agendada', 'processando')",
        "      AND o.status NOT IN ('agendada', 'processando')",
        (
            f"{STORE_PURGE}[postgres]",
            f"{SERVICES}::test_purge_deletes_old_settled_rows_in_bounded_rounds",
        ),
        ("postgres",),
        "the purge deletes old 'pendente' rows",
    ),
    Mutant(
        "pg-purge-max-age",
        PG_QUERIES,
        "WHERE o.data_hora < statement_timestamp() - make_interval(days => %(max_age_days)s)",
        "WHERE o.data_hora < statement_timestamp()",
        (
            f"{STORE_PURGE}[postgres]",
            f"{SERVICES}::test_purge_deletes_old_settled_rows_in_bounded_rounds",
        ),
        ("postgres",),
        "the purge deletes recent rows",
    ),
    Mutant(
        "mysql-purge-max-age",
        MY_QUERIES,
        "WHERE o.data_hora < NOW(6) - INTERVAL %(max_age_days)s DAY",
        "WHERE o.data_hora < NOW(6)",
        (f"{STORE_PURGE}[mysql]",),
        ("mysql",),
        "the purge deletes recent rows",
    ),
    # -- identifiers, webhooks, the server's token ------------------------------------------------
    Mutant(
        "identifiers-whole-name",
        "nsj_queue_lib/identifiers.py",
        '_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\\Z")',
        '_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")',
        (
            "tests/unit/test_identifiers.py::test_everything_else_is_refused",
            f"{STORE_CLIENT}::test_malicious_table_names_are_refused_before_any_sql",
        ),
        ("postgres", "mysql"),
        "a table name with SQL after a valid prefix is accepted",
    ),
    Mutant(
        "webhook-non-2xx-fails",
        "nsj_queue_lib/webhook.py",
        "        if not 200 <= response.status_code < 300:\n",
        "        if not 200 <= response.status_code < 600:\n",
        _contract(
            "test_webhook_delivers_the_publication_to_the_subscribers_url", "postgres", "mysql"
        ),
        ("postgres", "mysql"),
        "a webhook answering 500 counts as delivered",
    ),
    Mutant(
        "server-token-check",
        "nsj_queue_lib/server/loop.py",
        '                reason = "wrong token"\n',
        "                reason = None\n",
        ("tests/integration/test_server_security.py::test_missing_and_wrong_tokens_are_refused",),
        ("server",),
        "a wrong token is accepted",
    ),
    # -- issue 20, part 4: logs -- each log fix undone -------------------------------------
    Mutant(
        "failure-logs-its-traceback",
        FAILURES,
        "exc_info=error,",
        "exc_info=None,",
        (f"{LOGS}::test_a_failed_attempt_logs_its_traceback_once_and_its_next_attempt",),
        ("postgres",),
        "a failed attempt's traceback is lost (NoneType: None with LOG_DEBUG)",
    ),
    Mutant(
        "logging-left-to-the-application",
        "nsj_queue_lib/log.py",
        "    if not configured_by_us and application_configured_logging():\n",
        "    if False:\n",
        ("tests/unit/test_log.py::test_an_application_that_configured_logging_keeps_it",),
        ("postgres",),
        "the library adds its own handler to an application that configured logging",
    ),
    Mutant(
        "refused-login-stops-the-worker",
        WORKER_RUNTIME,
        "_START_REFUSALS = (QueueTableMissingError, ClaimRoutineError, DatabaseAccessError, ConfigError)",
        "_START_REFUSALS = (QueueTableMissingError, ClaimRoutineError, ConfigError)",
        (f"{OPERATE}::test_a_refused_login_stops_the_worker_process_at_start_with_exit_code_2",),
        ("postgres", "mysql"),
        "a worker whose login is refused retries forever",
    ),
    Mutant(
        "handler-ending-the-transaction-is-told",
        ATTEMPT,
        "        if not self.session.handler_transaction_open(conn):\n",
        "        if False:\n",
        (f"{OPERATE}::test_a_handler_that_ends_the_tasks_transaction_is_told_so",),
        ("postgres", "mysql"),
        "a handler that commits bd_conn gets COMMIT AND CHAIN errors (PostgreSQL) or silence",
    ),
    Mutant(
        "a-routing-worker-claims-every-processo",
        "nsj_queue_lib/worker_base.py",
        "        return frozenset(cls._task_registry.methods)\n",
        "        return None\n",
        ("tests/contract/test_deployments.py",),
        ("postgres", "mysql"),
        "a deployment claims another's processos and dead-letters them (no handler)",
    ),
    Mutant(
        "a-task-whose-transaction-is-gone-runs-anyway",
        ATTEMPT,
        "        return not self.session.handler_transaction_open(conn)\n",
        "        return False\n",
        (
            f"{EXACTLY_ONCE}::test_a_task_whose_transaction_ended_before_its_handler_is_given_back_not_run",
        ),
        ("postgres", "mysql"),
        "a handler runs with no transaction: its statements commit one by one",
    ),
    Mutant(
        "group-settle-unfenced",
        "nsj_queue_lib/db/postgres/claim_function.sql",
        "    IF settled < cardinality(done_ids) THEN\n",
        "    IF false THEN\n",
        (
            f"{EXACTLY_ONCE}::test_an_attempt_rescued_under_its_running_handler_commits_none_of_its_writes",
        ),
        ("postgres",),
        "a group whose task was rescued commits its handlers' writes (they run twice)",
    ),
    Mutant(
        "single-settle-unfenced",
        "nsj_queue_lib/db/postgres/claim_function.sql",
        "        IF settled = 0 THEN\n",
        "        IF false THEN\n",
        (
            f"{EXACTLY_ONCE}::test_an_attempt_rescued_under_its_running_handler_commits_none_of_its_writes",
        ),
        ("postgres",),
        "a rescued attempt commits its handler's writes (they run twice)",
    ),
    Mutant(
        "queue-name-checked-against-the-trigger",
        WORKER_RUNTIME,
        "                self._check_wake_ups(conn)\n",
        "",
        (
            f"{LOGS}::test_a_queue_name_the_trigger_does_not_notify_is_warned_at_start",
            f"{LOGS}::test_a_table_without_its_trigger_is_warned_at_start",
        ),
        ("postgres",),
        "a QUEUE_NAME the trigger does not notify starts silently",
    ),
    Mutant(
        "pool-lines-silenced",
        PG_DRIVER,
        "            pool_logger.addFilter(_POOL_FILTER)\n",
        "            pass\n",
        ("tests/unit/test_log.py::test_psycopg_pool_lines_about_the_workers_pool_are_silenced",),
        ("postgres",),
        "psycopg_pool repeats every failed connection of the worker's pool",
    ),
    Mutant(
        "activity-line-while-busy",
        WORKER_RUNTIME,
        "        if done or failed or rescued or running:\n",
        "        if False:\n",
        (f"{LOGS}::test_one_info_line_per_interval_while_busy_none_while_idle",),
        ("postgres",),
        "a busy worker says nothing of its activity",
    ),
    Mutant(
        "activity-line-silent-while-idle",
        WORKER_RUNTIME,
        "        if done or failed or rescued or running:\n",
        "        if True:\n",
        (f"{LOGS}::test_one_info_line_per_interval_while_busy_none_while_idle",),
        ("postgres",),
        "an idle worker logs a line every minute",
    ),
    # -- handlers per processo, retry policies, permanent errors --------------------------
    Mutant(
        "route-by-processo",
        "nsj_queue_lib/worker_base.py",
        '        method_name = self._task_registry.methods.get(tarefa.get("processo") or "")\n',
        "        method_name = None\n",
        _policies("test_tasks_are_routed_by_processo_each_with_its_own_max_retry", "postgres"),
        ("postgres",),
        "every task goes to execute, @Task methods are never called",
    ),
    Mutant(
        "permanent-error-skips-retries",
        "nsj_queue_lib/retry_policy.py",
        "        if failure.permanent:\n",
        "        if failure.permanent and False:\n",
        _policies(
            "test_a_permanent_error_is_not_retried_and_its_dead_letter_follows_at_once",
            "postgres",
            "mysql",
        ),
        ("postgres", "mysql"),
        "a PermanentError is retried like any error",
    ),
    Mutant(
        "exponential-full-jitter",
        "nsj_queue_lib/retry_policy.py",
        "        return rng.uniform(0.0, min(cap, self.base_s * 2.0**exponent))\n",
        "        return min(cap, self.base_s * 2.0**exponent)\n",
        _policies("test_exponential_backoff_draws_each_delay_between_zero_and_its_cap", "postgres"),
        ("postgres",),
        "exponential retries of tasks that failed together come back together",
    ),
    Mutant(
        "retry-after-is-the-earliest-attempt",
        "nsj_queue_lib/retry_policy.py",
        "            delay = max(delay, failure.retry_after_s)\n",
        "            delay = min(delay, failure.retry_after_s)\n",
        _policies(
            "test_webhook_4xx_is_permanent_408_is_retried_and_429_retry_after_is_honoured",
            "postgres",
        ),
        ("postgres",),
        "a 429's Retry-After is ignored",
    ),
    Mutant(
        "webhook-4xx-permanent",
        "nsj_queue_lib/webhook.py",
        "    if 400 <= status < 500 and status not in RETRYABLE_4XX:\n",
        "    if 400 <= status < 500 and status in RETRYABLE_4XX:\n",
        _policies(
            "test_webhook_4xx_is_permanent_408_is_retried_and_429_retry_after_is_honoured",
            "mysql",
        ),
        ("mysql",),
        "a 404 is retried for days and a 408 is dead-lettered at once",
    ),
    # -- issue 17: a task's life cycle ----------------------------------------------------
    Mutant(
        "cancel-request-survives-the-rescue",
        TASK_SESSION,
        "    if store.cancel_if_requested(conn, task_id, model.CANCELLED_WHILE_RUNNING):\n",
        "    if False:\n",
        (
            f"{LIFECYCLE}::test_a_cancel_request_survives_a_kill_9_and_the_rescue[postgres]",
            f"{STORE_LIFECYCLE}::"
            "test_progress_cancel_requests_and_the_settling_of_a_cancelled_attempt[postgres]",
        ),
        ("postgres",),
        "a rescued or failed attempt whose cancel was requested is retried",
    ),
    Mutant(
        "pg-cancel-is-notified",
        "nsj_queue_lib/queue_client.py",
        "            if status == model.PROCESSANDO:\n",
        "            if False:\n",
        (
            f"{LIFECYCLE}::"
            "test_a_running_task_sees_its_cancel_and_its_progress_is_seen_meanwhile[postgres]",
        ),
        ("postgres",),
        "a running task learns of its cancel only from the 5 s safety poll",
    ),
    Mutant(
        "mysql-cancel-poll",
        "nsj_queue_lib/runtime/cancel_watch.py",
        "        for task_id in requested:\n",
        "        for task_id in ():\n",
        (
            f"{LIFECYCLE}::"
            "test_a_running_task_sees_its_cancel_and_its_progress_is_seen_meanwhile[mysql]",
        ),
        ("mysql",),
        "a MySQL worker never learns that its running task was cancelled",
    ),
    Mutant(
        "server-pushes-cancels",
        "nsj_queue_lib/server/check_tasks.py",
        "                announced = self._announce_cancels(source, announced)\n",
        "                pass\n",
        (
            f"{LIFECYCLE}::test_a_running_task_sees_its_cancel_and_its_progress_is_seen_meanwhile"
            "[singlestore-via-server]",
        ),
        ("mysql", "server"),
        "in client/server mode on MySQL a worker learns of a cancel only from its 5 s poll",
    ),
    Mutant(
        "timeout-gives-the-handler-up",
        "nsj_queue_lib/runtime/timeouts.py",
        "                given_up = self.executor.abandon(item.task.id)\n",
        "                given_up = None\n",
        (
            f"{LIFECYCLE}::test_a_hung_handler_is_timed_out_and_retried_while_the_others_drain[postgres]",
        ),
        ("postgres",),
        "a handler stuck past its timeout holds its executor forever",
    ),
    Mutant(
        "progress-written-outside-the-handler",
        "nsj_queue_lib/runtime/lifecycle.py",
        "                self.progress.flush(item.context for item in self.executor.running_tasks())\n",
        "                pass\n",
        (
            f"{LIFECYCLE}::"
            "test_a_running_task_sees_its_cancel_and_its_progress_is_seen_meanwhile[postgres]",
        ),
        ("postgres",),
        "progress is not visible while the task runs",
    ),
    Mutant(
        "deaf-listen-falls-back-to-polling",
        "nsj_queue_lib/notify/checked.py",
        "            self._deaf = not heard\n",
        "            self._deaf = False\n",
        (
            f"{POOLER}::test_a_new_task_wakes_the_worker_and_readyz_tells_how[transaction]",
            "tests/unit/test_checked_listener.py::test_a_deaf_listen_warns_once_and_polls",
        ),
        ("postgres",),
        "behind a transaction pooler new tasks wait 30 s for the dispatcher's round",
    ),
    Mutant(
        "service-lock-inside-a-transaction",
        "nsj_queue_lib/runtime/service.py",
        "        self._holder = holder\n        return True\n",
        "        holder.commit()\n        self._holder = holder\n        return True\n",
        (f"{POOLER}::test_a_services_lock_is_held_for_its_whole_run[transaction-RetryService]",),
        ("postgres",),
        "behind a transaction pooler a service's lock stays on a server connection it left",
    ),
    Mutant(
        "prepared-call-rerun-unnamed",
        "nsj_queue_lib/db/postgres/wire.py",
        "            if begin and state.name and isinstance(error, psycopg.errors.InvalidSqlStatementName):\n",
        "            if False:\n",
        (
            "tests/integration/test_pg_wire.py::"
            "test_discard_all_between_transactions_switches_to_the_unnamed_statement_at_no_cost",
        ),
        ("postgres",),
        "behind a transaction pooler claims fail on a missing prepared statement",
    ),
    Mutant(
        "mysql-kill-of-an-ended-session",
        "nsj_queue_lib/db/mysql/driver.py",
        "            if not any(error_code(e) == NO_SUCH_SESSION for e in exception_chain(exc)):\n",
        "            if True:\n",
        (
            "tests/integration/store/test_store_settle.py::"
            "test_ending_a_session_that_ended_already_is_no_error[mysql]",
        ),
        ("mysql",),
        "a timeout's give-up that races the handler's return leaves the attempt unsettled",
    ),
    Mutant(
        "pg-claim-position-ignored",
        "nsj_queue_lib/db/postgres/claim_function.sql",
        "                IF pos_id IS NOT NULL THEN\n",
        "                IF false THEN\n",
        (
            "tests/integration/store/test_store_claim_position.py::"
            "test_under_a_held_snapshot_the_position_skips_the_tasks_claimed_since[postgres]",
        ),
        ("postgres",),
        "claims under a held snapshot walk every task claimed since it",
    ),
    Mutant(
        "pg-partition-day-trigger",
        "nsj_queue_lib/db/postgres/partitions.sql",
        "        ELSE (coalesce(NEW.finished_at, clock_timestamp()) AT TIME ZONE 'UTC')::date"
        " - DATE '1970-01-01'\n",
        "        ELSE 1\n",
        (
            "tests/integration/store/test_store_partitioned.py::"
            "test_a_1_2_2_workers_update_moves_the_row_too[partitioned]",
        ),
        ("postgres",),
        "a 1.2.2 worker's update leaves a finished row in the hot partition",
    ),
    Mutant(
        "given-up-group-wakes-no-slot",
        "nsj_queue_lib/runtime/drain_group.py",
        "            self.tokens.wake(1)\n",
        "            pass\n",
        (
            "tests/unit/test_executor_step_back_loop.py::"
            "test_a_given_up_groups_tasks_back_in_the_queue_wake_a_slot",
        ),
        ("postgres",),
        "a given-up group's tasks wait in 'pendente' with every slot idle",
    ),
    Mutant(
        "pg-retry-drops-kept-payload",
        PG_QUERIES,
        "    CASE WHEN f.id_inicial IS NOT NULL THEN f.payload END\nFROM failed AS f",
        "    NULL\nFROM failed AS f",
        (
            "tests/integration/store/test_store_partitioned.py::"
            "test_retention_keeps_days_ahead_and_drops_expired_days_whole[partitioned]",
        ),
        ("postgres",),
        "a retry after its first attempt's day was dropped runs without its payload",
    ),
    Mutant(
        "pg-migrated-table-unnoticed",
        PG_STORE,
        "        if not self.partitioned:\n            self._notice_migration(conn)\n",
        "",
        (
            "tests/integration/store/test_store_migration.py::"
            "test_a_worker_bound_before_the_migration_rotates_the_partitions_from_its_next_purge",
        ),
        ("postgres",),
        "a worker bound before the migration never rotates the day partitions",
    ),
    Mutant(
        "pg-release-counts-settled-edges-again",
        "nsj_queue_lib/db/postgres/workflow_tables.sql",
        "        WHERE p.parent_id = ANY(parent_ids) AND NOT p.settled AND p.slot >= 0\n"
        "        GROUP BY p.child_id\n",
        "        WHERE p.parent_id = ANY(parent_ids) AND p.slot >= 0\n        GROUP BY p.child_id\n",
        (
            "tests/integration/store/test_store_dependency_edges.py::"
            "test_a_dead_letter_retried_by_hand_is_not_counted_twice[postgres]",
        ),
        ("postgres",),
        "a parent retried by hand counts its 'run' children down a second time",
    ),
    Mutant(
        "pg-release-waits-for-a-held-slot",
        "nsj_queue_lib/db/postgres/workflow_tables.sql",
        "        WHERE w.child_id = edges.child_id AND w.pending_parents >= edges.n\n"
        "        ORDER BY w.slot\n        LIMIT 1\n        FOR UPDATE SKIP LOCKED;\n",
        "        WHERE w.child_id = edges.child_id AND w.pending_parents >= edges.n\n"
        "        ORDER BY w.slot\n        LIMIT 1\n        FOR UPDATE;\n",
        (
            "tests/integration/store/test_store_dependency_edges.py::"
            "test_a_settlement_takes_a_free_slot_instead_of_waiting[postgres]",
        ),
        ("postgres",),
        "a fan-in's parents queue on each other's slots instead of taking free ones",
    ),
    Mutant(
        "pg-claim-from-the-position-probes-every-keyed-row",
        "nsj_queue_lib/db/postgres/dialect.py",
        '    " BETWEEN (pos_data_hora, pos_id) AND (pos_edge_data_hora, pos_edge_id)"\n',
        '    " >= (pos_data_hora, pos_id)"\n',
        (
            "tests/integration/store/test_store_claim_position.py::"
            "test_a_claim_from_the_position_probes_one_window_of_a_keys_backlog[postgres]",
        ),
        ("postgres",),
        "each call of a busy process probes its whole backlog of queued calls",
    ),
    Mutant(
        "pg-claim-from-the-position-walks-past-its-window-to-the-end",
        "nsj_queue_lib/db/postgres/dialect.py",
        '    " BETWEEN (pos_data_hora, pos_id) AND (pos_edge_data_hora, pos_edge_id)"\n',
        '    " >= (pos_data_hora, pos_id)"\n'
        '    " AND (q.lock_key IS NULL OR (q.data_hora, q.id) <= (pos_edge_data_hora, pos_edge_id))"\n',
        (
            "tests/integration/store/test_store_claim_position.py::"
            "test_a_claim_from_the_position_of_many_keys_walks_a_window_not_the_backlog[postgres]",
        ),
        ("postgres",),
        "calls to many processes walk the whole backlog at every claim once a window is claimed",
    ),
    Mutant(
        "pg-claim-keeps-every-look-ups-window",
        "nsj_queue_lib/db/postgres/claim_function.sql",
        "                    IF claimed >= claim_limit OR NOT EXISTS (\n",
        "                    IF false AND NOT EXISTS (\n",
        (
            "tests/integration/store/test_store_claim_window.py::"
            "test_a_window_that_gives_what_was_asked_is_not_kept",
        ),
        ("postgres",),
        "a plain drain's claims go window by window: a statement more each window",
    ),
    Mutant(
        "pg-claim-from-the-position-never-moves-its-window",
        "nsj_queue_lib/db/postgres/claim_function.sql",
        "                            IF claimed > 0 THEN\n                                -- The next window",
        "                            IF false THEN\n                                -- The next window",
        (
            "tests/integration/store/test_store_claim_window.py::"
            "test_from_the_position_a_claim_takes_the_next_window_when_its_own_has_nothing[postgres]",
        ),
        ("postgres",),
        "a position's window is never moved on: every claim past it walks two windows",
    ),
    Mutant(
        "pg-release-plans-under-its-callers-settings",
        "nsj_queue_lib/db/postgres/workflow_tables.sql",
        "SET enable_sort = on\nSET enable_bitmapscan = on\nSET plan_cache_mode = force_generic_plan\n",
        "",
        (
            "tests/integration/store/test_store_postgres_only.py::"
            "test_a_settle_of_a_fan_outs_children_reads_their_edges_and_rows_by_key[postgres]",
        ),
        ("postgres",),
        "called from the claim function, a settle's edge count reads every edge of the queue",
    ),
    Mutant(
        "pg-release-joins-sole-children-from-their-rows",
        "nsj_queue_lib/db/postgres/workflow_tables.sql",
        "    WHERE t.id = ANY(ARRAY(\n"
        "            SELECT p.child_id FROM {parents_table} AS p\n"
        "            WHERE p.parent_id = ANY(parent_ids) AND p.slot = -1 AND NOT p.settled\n"
        "        ))\n"
        "      AND t.status || '' = 'aguardando';\n",
        "    FROM {parents_table} AS p\n"
        "    WHERE p.parent_id = ANY(parent_ids) AND p.slot = -1 AND NOT p.settled\n"
        "      AND t.id = p.child_id AND t.status = 'aguardando';\n",
        (
            "tests/integration/store/test_store_postgres_only.py::"
            "test_a_settle_of_a_fan_outs_children_reads_their_edges_and_rows_by_key[postgres]",
        ),
        ("postgres",),
        "each settle of a fan-out's children walks the 'aguardando' index's every entry",
    ),
    Mutant(
        "pg-release-slot-by-slot-waits-for-a-held-slot",
        "nsj_queue_lib/db/postgres/workflow_tables.sql",
        "                LIMIT 1\n                FOR UPDATE SKIP LOCKED;\n",
        "                LIMIT 1\n                FOR UPDATE;\n",
        (
            "tests/integration/store/test_store_dependency_edges.py::"
            "test_a_settlement_takes_its_count_from_several_free_slots[postgres]",
        ),
        ("postgres",),
        "a settlement needing several slots queues on a held one instead of the free ones",
    ),
    Mutant(
        "pg-released-child-keeps-its-insert-data-hora",
        "nsj_queue_lib/db/postgres/workflow_tables.sql",
        "    SET status = 'pendente', data_hora = greatest(t.data_hora, clock_timestamp())\n"
        "    WHERE t.id = ANY(ARRAY(\n",
        "    SET status = 'pendente'\n    WHERE t.id = ANY(ARRAY(\n",
        (
            "tests/integration/store/test_store_claim_position.py::"
            "test_a_child_released_by_its_parent_is_claimed_from_an_empty_position[postgres]",
        ),
        ("postgres",),
        "a released child waits behind the claims' position for up to 5 s",
    ),
    Mutant(
        "breaker-any-task-decides-the-trial",
        "nsj_queue_lib/fleet/breakers.py",
        "and state.trial_task == task_id",
        "",
        ("tests/unit/test_breaker_decisions.py::test_while_open_only_the_trial_task_decides",),
        ("postgres",),
        "a task claimed before the breaker opened decides its trial",
    ),
    # -- session 19: the dispatcher's plan, the one-round-trip insert, the server's push --
    Mutant(
        "dispatcher-scheduled-replans",
        "nsj_queue_lib/runtime/dispatcher.py",
        "            replan = SCHEDULED_PAYLOAD in wake_ups",
        "            replan = False",
        ("tests/unit/test_dispatcher_replan.py::test_a_scheduled_notification_replans_at_once",),
        ("postgres",),
        "a task scheduled later waits for the old plan's time (up to a second late)",
    ),
    Mutant(
        "single-insert-only-where-it-begins",
        "nsj_queue_lib/db/postgres/single_insert.py",
        "pgconn.transaction_status == _IDLE",
        "pgconn.transaction_status in (_IDLE, pq.TransactionStatus.INTRANS)",
        (
            "tests/integration/test_single_insert_pg.py::"
            "test_inside_an_open_transaction_and_in_autocommit",
        ),
        ("postgres",),
        "behind a pooler, a statement prepared earlier fails the caller's transaction",
    ),
    Mutant(
        "server-ends-only-waited-tasks",
        "nsj_queue_lib/workflow/server_ends.py",
        "self._locks.held(asked[start : start + NAMES_PER_LOOK])",
        "asked[start : start + NAMES_PER_LOOK]",
        (
            "tests/integration/test_wait_push_server.py::"
            "test_only_the_tasks_someone_waits_for_are_notified",
        ),
        ("server",),
        "every task end is broadcast to every waiter through the socket server",
    ),
    Mutant(
        "server-mode-worker-announces-ends",
        "nsj_queue_lib/runtime/server_clients.py",
        "    return EndAnnouncer(settings.queue_table, locks, stop)",
        "    return None",
        (
            "tests/integration/test_wait_push_server.py::"
            "test_wait_for_task_on_mariadb_is_pushed_by_a_worker_in_server_mode",
        ),
        ("mysql",),
        "a worker in CLIENT_SERVER_MODE never wakes wait_for_task's waiters",
    ),
    Mutant(
        "web-wait-ignores-the-socket-server",
        "nsj_queue_lib/web/queues.py",
        "            return QueueClient(conn, self.table).wait_for_task(\n"
        "                task_id, timeout_s, server=self._connections.driver.settings\n"
        "            )\n",
        "            return QueueClient(conn, self.table).wait_for_task(task_id, timeout_s)\n",
        (
            "tests/integration/test_wait_push_server.py::"
            "test_wait_for_task_on_mariadb_is_pushed_by_a_worker_in_server_mode",
        ),
        ("mysql",),
        "POST /api/v1/tasks?wait= polls on MySQL/MariaDB although the workers push ends",
    ),
    Mutant(
        "my-completion-reads-its-first-attempt-from-every-partition",
        MY_PROCEDURE,
        "        SELECT COALESCE(id_inicial, id) INTO v_done_first FROM {table}\n"
        "        WHERE {hot}id = p_task_id;\n",
        "        SELECT COALESCE(id_inicial, id) INTO v_done_first FROM {table}\n"
        "        WHERE id = p_task_id;\n",
        (
            "tests/integration/store/test_store_partitioned_mysql.py::"
            "test_the_claim_procedures_completion_reads_the_hot_partition_alone",
        ),
        ("mysql",),
        "each success on a partitioned MariaDB queue probes every day partition's primary key",
    ),
    Mutant(
        "my-group-end-finds-children-through-the-moved-rows",
        "nsj_queue_lib/workflow/dependencies.py",
        "    if first_ids is not None:\n",
        "    if False:\n",
        (
            "tests/integration/store/test_store_partitioned_mysql.py::"
            "test_completions_outside_the_procedure_find_children_without_the_moved_rows",
        ),
        ("mysql",),
        "a commit group's end on a partitioned MariaDB queue probes every day partition",
    ),
    Mutant(
        "a-retrys-first-id-is-its-own",
        "nsj_queue_lib/model.py",
        '        return int(self.row.get("id_inicial") or self.id)\n',
        "        return self.id\n",
        (
            "tests/integration/store/test_store_dependencies.py::"
            "test_a_retried_parents_success_releases_the_child_on_every_path",
        ),
        ("mysql",),
        "a retried parent's success on MariaDB outside the claim procedure leaves its children",
    ),
    Mutant(
        "my-release-reads-every-waiting-task",
        "nsj_queue_lib/db/mysql/workflow_tables.sql",
        "    UPDATE {parents_table} AS p\n"
        "        STRAIGHT_JOIN {waiting_table} AS w ON w.child_id = p.child_id\n"
        "        STRAIGHT_JOIN {table} AS t ON {hot_t}t.id = w.child_id\n"
        "    SET t.status = 'pendente'\n"
        "    WHERE p.parent_id = p_parent AND w.pending_parents <= 0 AND t.status = 'aguardando';\n",
        "    UPDATE {table} AS t\n"
        "    SET t.status = 'pendente'\n"
        "    WHERE t.status = 'aguardando' AND t.id IN (\n"
        "        SELECT w.child_id FROM {waiting_table} AS w\n"
        "        WHERE w.pending_parents <= 0 AND w.child_id IN (\n"
        "            SELECT p.child_id FROM {parents_table} AS p WHERE p.parent_id = p_parent\n"
        "        )\n"
        "    );\n",
        (
            "tests/integration/store/test_store_dependencies.py::"
            "test_a_release_reads_its_childrens_rows_not_every_waiting_task",
        ),
        ("mysql",),
        "each parent's success on MariaDB reads every waiting task of the queue",
    ),
    Mutant(
        "a-last-completion-forgets-its-first-id",
        "nsj_queue_lib/runtime/liveness.py",
        "return self.store.complete_and_claim(conn, task.id, mensagem, claim_next, task.first_id)",
        "return self.store.complete_and_claim(conn, task.id, mensagem, claim_next)",
        (
            "tests/integration/store/test_store_partitioned_mysql.py::"
            "test_completions_outside_the_procedure_find_children_without_the_moved_rows",
        ),
        ("mysql",),
        "a MariaDB completion with no claim after it probes every partition for children",
    ),
    Mutant(
        "a-client-lock-trusts-a-retried-row",
        "nsj_queue_lib/db/latest_attempt.py",
        'if row is not None and not row["reenfileirado"]:',
        "if row is not None:",
        (
            "tests/integration/store/test_store_mysql_only.py::"
            "test_a_cancel_sees_what_changed_after_the_callers_snapshot",
        ),
        ("mysql",),
        "cancel_task on MariaDB misses a retry committed after the caller's snapshot",
    ),
    Mutant(
        "a-client-never-learns-the-layout",
        "nsj_queue_lib/db/layout_cache.py",
        "    answer = probe(conn, dialect, queue_table)\n",
        "    answer = False\n",
        (
            "tests/integration/store/test_store_mysql_only.py::"
            "test_a_clients_open_transaction_by_task_id_holds_up_no_insert",
        ),
        ("mysql",),
        "a caller's open transaction on a partitioned MariaDB queue holds up every insert",
    ),
    Mutant(
        "status-reads-every-day-on-mariadb",
        "nsj_queue_lib/db/mysql/inspection.py",
        '                if tallied and layout_cache.partitioned(conn, "mysql", self.queue_table):\n',
        "                if False:\n",
        (
            "tests/integration/store/test_store_partitioned_mysql.py::"
            "test_status_reads_the_hot_partition_and_the_days_since_the_last_fold",
        ),
        ("mysql",),
        "nsjq status and the depth metric read every day partition's indexes on MariaDB",
    ),
    Mutant(
        "a-fair-turn-reads-every-day",
        "nsj_queue_lib/db/mysql/family_store.py",
        "        self._know_layout(conn)  # its reads of ready tasks, pinned to them\n",
        "",
        (
            "tests/integration/store/test_store_partitioned_mysql.py::"
            "test_a_clients_fair_turn_reads_the_hot_partition_alone",
        ),
        ("mysql",),
        "each enqueue with a fair key reads every day partition's indexes on MariaDB",
    ),
    Mutant(
        "a-week-drops-with-its-first-day",
        "nsj_queue_lib/db/mysql/retention.py",
        "        expired = [p for p in history if p.days.stop <= now - max_age_days]\n",
        "        expired = [p for p in history if p.first + 1 <= now - max_age_days]\n",
        (
            "tests/integration/store/test_store_partitioned_mysql.py::"
            "test_a_week_goes_only_once_its_last_day_expired",
        ),
        ("mysql",),
        "a MariaDB week partition is dropped while its last days are younger than the age",
    ),
    Mutant(
        "the-summary-plans-the-days-ahead",
        "nsj_queue_lib/db/inspection.py",
        '    return f"t.finished_day BETWEEN {int(first)} AND {int(last)} AND "\n',
        '    return f"t.finished_day >= {int(first)} AND "\n',
        (
            "tests/integration/store/test_store_partitioned.py::"
            "test_status_plans_the_hot_partition_and_the_days_since_the_last_fold",
            "tests/integration/store/test_store_partitioned_mysql.py::"
            "test_status_reads_the_hot_partition_and_the_days_since_the_last_fold",
        ),
        ("postgres", "mysql"),
        "nsjq status plans every partition made ahead on each new session",
    ),
    Mutant(
        "breakers-read-the-queue-table",
        "nsj_queue_lib/db/pause_store.py",
        "        if not tasks:\n            return {}\n",
        "        if True:\n            return {}\n",
        (
            "tests/integration/store/test_store_breakers.py::"
            "test_a_trials_bound_is_its_tasks_own_timeout",
        ),
        ("postgres", "mysql"),
        "a trial's bound ignores its task's own timeout_s",
    ),
    Mutant(
        "a-client-call-commits-half",
        "nsj_queue_lib/db/own_transaction.py",
        "    return driver.own_transaction(conn)\n",
        "    return contextlib.nullcontext()\n",
        (
            "tests/integration/store/test_store_own_transaction.py::"
            "test_a_process_start_is_written_whole_or_not_at_all",
        ),
        ("postgres", "mysql"),
        "on an autocommit connection a process's task is seen before the row naming it",
    ),
    Mutant(
        "a-client-call-commits-the-callers-transaction",
        "nsj_queue_lib/db/mysql/own_transaction.py",
        "    if status & SERVER_STATUS.SERVER_STATUS_IN_TRANS:\n",
        "    if False:\n",
        (
            "tests/integration/store/test_store_own_transaction.py::"
            "test_inside_the_callers_transaction_nothing_is_committed_by_the_call",
        ),
        ("mysql",),
        "a client call commits the transaction its caller opened (MySQL's implicit commit)",
    ),
    Mutant(
        "an-open-dedupe-enqueue-holds-up-the-queue",
        "nsj_queue_lib/db/mysql/indexes.sql",
        "CREATE UNIQUE INDEX {idx_dedupe} ON {table} (dedupe_active DESC{with_day});\n",
        "CREATE UNIQUE INDEX {idx_dedupe} ON {table} (dedupe_active{with_day});\n",
        (
            "tests/integration/store/test_store_unique_index_gaps.py::"
            "test_an_open_enqueue_of_a_dedupe_key_holds_up_no_other_enqueue",
        ),
        ("mysql",),
        "a transaction that enqueued a dedupe key holds up every enqueue of the queue",
    ),
    Mutant(
        "a-lock-key-claim-holds-up-the-queue",
        "nsj_queue_lib/db/mysql/indexes.sql",
        "ON {table} (lock_key_running DESC{with_day});\n",
        "ON {table} (lock_key_running{with_day});\n",
        (
            "tests/integration/store/test_store_unique_index_gaps.py::"
            "test_a_claim_of_a_lock_key_holds_up_no_enqueue_until_its_commit",
        ),
        ("mysql",),
        "a claim of a lock key holds up every enqueue of the queue until its commit",
    ),
    Mutant(
        "a-held-claim-writes-its-rows",
        PG_CLAIM_FUNCTION,
        "hold AND q.lock_key IS NULL",
        "false AND q.lock_key IS NULL",
        (
            "tests/integration/test_one_write.py::"
            "test_a_held_drain_writes_each_task_once_with_its_handlers_writes",
        ),
        ("postgres",),
        "QUEUE_ONE_WRITE claims write every task twice, as without it",
    ),
    Mutant(
        "a-dead-workers-held-tasks-go-uncounted",
        "nsj_queue_lib/db/postgres/held_groups.sql",
        "t.status = 'pendente'\n    FOR UPDATE OF t SKIP LOCKED",
        "t.status = 'pendente' AND false\n    FOR UPDATE OF t SKIP LOCKED",
        (
            "tests/acceptance/test_worker_processes.py::"
            "test_a_held_task_whose_worker_is_killed_is_counted_and_retried",
        ),
        ("postgres",),
        "the held tasks of a worker killed mid-group run again without their attempt counted",
    ),
    Mutant(
        "the-console-sees-held-tasks-waiting",
        "nsj_queue_lib/db/postgres/inspection.py",
        "        return move_held(rows, held, DEPTH_BLANK)",
        "        return rows",
        (
            "tests/integration/test_one_write.py::"
            "test_nsjq_status_and_the_depth_count_a_held_groups_tasks_as_running",
        ),
        ("postgres",),
        "the console's overview and /metrics count a held group's running tasks as ready",
    ),
    Mutant(
        "nsjq-status-lists-no-held-task-running",
        "nsj_queue_lib/db/postgres/inspection.py",
        "        rows += [listed_row(row) for row in held]",
        "        rows += []",
        (
            "tests/integration/test_one_write.py::"
            "test_nsjq_status_and_the_depth_count_a_held_groups_tasks_as_running",
        ),
        ("postgres",),
        "nsjq status lists none of a held group's running tasks",
    ),
    Mutant(
        "a-task-two-held-groups-name-counts-twice",
        "nsj_queue_lib/db/postgres/held_status.py",
        "SELECT DISTINCT ON (t.id) {by} AS key",
        "SELECT {by} AS key",
        (
            "tests/integration/test_one_write.py::"
            "test_what_people_see_of_held_tasks_on_both_layouts",
        ),
        ("postgres",),
        "a task given back by one held group and claimed by another counts twice as running",
    ),
    Mutant(
        "a-connection-lost-before-libpq-read-it-is-a-handler-failure",
        "nsj_queue_lib/db/postgres/driver.py",
        "            conn.pgconn.consume_input()\n",
        "            pass\n",
        (
            "tests/integration/test_pg_connection_lost.py::"
            "test_an_error_that_came_before_libpq_read_the_servers_end_is_the_connections_loss",
        ),
        ("postgres",),
        "a connection the server ended, raised before libpq read its end, fails its task with "
        "the handler's back-off instead of releasing it",
    ),
    Mutant(
        "no-sdk-is-asked-again-at-every-attempt",
        "nsj_queue_lib/observability/tracing.py",
        "            self._no_sdk_until = now + NO_SDK_RECHECK_SECONDS",
        "            self._no_sdk_until = now",
        (
            "tests/unit/test_attempt_tracer.py::"
            "test_following_the_global_provider_asks_it_at_most_every_recheck_until_an_sdk_is_set",
        ),
        ("postgres",),
        "every attempt asks OpenTelemetry for the global provider (an environment read)",
    ),
)


# -- checking the list ------------------------------------------------------------------------


def _test_function(test: str) -> str:
    """The test function a pytest node id names (``file::[Class::]name[params]``), or ''."""
    node = test.split("::", 1)[1] if "::" in test else ""
    return node.rsplit("::", 1)[-1].split("[", 1)[0]


def _defines(test_file: Path, test: str) -> bool:
    """Whether the file defines the node's test function (its parameters are not checked)."""
    function = _test_function(test)
    if not function:
        return True
    text = test_file.read_text(encoding="utf-8")
    return re.search(rf"^\s*(async\s+)?def {re.escape(function)}\(", text, re.MULTILINE) is not None


def problems(mutants: Iterable[Mutant], root: Path = ROOT) -> list[str]:
    """What is wrong with the list against the tree at ``root`` (empty when all is well)."""
    found: list[str] = []
    seen: set[str] = set()
    for m in mutants:
        if m.name in seen:
            found.append(f"{m.name}: the name is used twice")
        seen.add(m.name)
        path = root / m.file
        if not path.is_file():
            found.append(f"{m.name}: {m.file} does not exist")
            continue
        count = path.read_text(encoding="utf-8").count(m.original)
        if count != 1:
            found.append(f"{m.name}: its original text occurs {count} times in {m.file}, not once")
        if m.original == m.replacement:
            found.append(f"{m.name}: the replacement is the original")
        if not m.tests:
            found.append(f"{m.name}: no tests")
        for test in m.tests:
            test_file = test.split("::", 1)[0]
            if not (root / test_file).is_file():
                found.append(f"{m.name}: {test_file} does not exist")
            elif not _defines(root / test_file, test):
                found.append(f"{m.name}: {test_file} defines no {_test_function(test)}")
            if "tests/golden" in test or "db_gen" in test_file:
                found.append(f"{m.name}: {test} only compares DDL text")
        unknown = set(m.dialects) - set(DIALECTS)
        if unknown or not m.dialects:
            found.append(f"{m.name}: dialects must be among {DIALECTS}, got {m.dialects}")
    return found


def select(
    mutants: Sequence[Mutant], names: Sequence[str], dialects: Sequence[str]
) -> list[Mutant]:
    chosen = []
    for m in mutants:
        if names and not any(n in m.name for n in names):
            continue
        if dialects and not set(dialects) & set(m.dialects):
            continue
        chosen.append(m)
    return chosen


# -- running ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    mutant: Mutant
    status: str  # caught, SURVIVED, ERROR
    seconds: float
    detail: str = ""
    output: str = ""


def child_env(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The scratch copy must win over the editable install of the real tree,
    # in pytest and in every worker or server process a test starts.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(scratch), env.get("PYTHONPATH")]))
    # Stale bytecode must never stand in for a file that was put back.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CI"] = "true"
    return env


def make_scratch(parent: Path, index: int) -> Path:
    scratch = parent / f"tree{index}"
    shutil.copytree(ROOT, scratch, ignore=COPY_IGNORE, symlinks=True)
    probe = subprocess.run(
        [sys.executable, "-c", "import nsj_queue_lib; print(nsj_queue_lib.__file__)"],
        cwd=scratch,
        env=child_env(scratch),
        capture_output=True,
        text=True,
        check=False,
    )
    imported = Path(probe.stdout.strip() or "?").resolve()
    if probe.returncode != 0 or not imported.is_relative_to(scratch.resolve()):
        raise SystemExit(
            f"the scratch copy's package is not the one imported ({imported}):\n{probe.stderr}"
        )
    return scratch


_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)")
_SUMMARY_LINE = re.compile(r"\d+ (passed|failed|errors?|skipped|deselected)\b.* in [\d.]+s")


def pytest_run(scratch: Path, tests: Sequence[str], stop_first: bool) -> tuple[int, str, dict]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["--timeout", str(TEST_TIMEOUT)]
    if stop_first:
        command.append("-x")
    command += list(tests)
    try:
        done = subprocess.run(
            command,
            cwd=scratch,
            env=child_env(scratch),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        # Captured output comes as bytes here, whatever text= says.
        output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return -1, output + f"\n(no result after {RUN_TIMEOUT} s)", {}
    output = done.stdout + done.stderr
    lines = [line for line in output.splitlines() if line.strip()]
    counts: dict[str, int] = {}
    # pytest's summary line, the last one but for what a leftover thread logged after it
    # (a worker's service writing to stderr as the interpreter exits).
    summary = next((line for line in reversed(lines) if _SUMMARY_LINE.search(line)), "")
    for number, what in _SUMMARY.findall(summary):
        counts["errors" if what.startswith("error") else what] = int(number)
    return done.returncode, output, counts


def run_mutant(scratch: Path, mutant: Mutant) -> Outcome:
    path = scratch / mutant.file
    original = path.read_bytes()
    text = original.decode("utf-8")
    if text.count(mutant.original) != 1:
        return Outcome(mutant, "ERROR", 0.0, "the original text is not in the scratch copy once")
    started = time.monotonic()
    try:
        path.write_text(text.replace(mutant.original, mutant.replacement), encoding="utf-8")
        code, output, counts = pytest_run(scratch, mutant.tests, stop_first=True)
    finally:
        path.write_bytes(original)
    seconds = time.monotonic() - started
    if code == 1 and (counts.get("failed") or counts.get("errors")):
        return Outcome(mutant, "caught", seconds, output=output)
    if code == 0:
        skipped = counts.get("skipped")
        note = f"{counts.get('passed', 0)} passed" + (f", {skipped} skipped" if skipped else "")
        return Outcome(mutant, "SURVIVED", seconds, note, output)
    return Outcome(mutant, "ERROR", seconds, f"pytest exit code {code}", output)


def failures(output: str) -> list[str]:
    """pytest's short summary lines of the tests that failed (``FAILED node - reason``)."""
    # Captured log lines start with "ERROR" too, but padded: "ERROR    logger:file.py:12 ...".
    return [line for line in output.splitlines() if re.match(r"(FAILED|ERROR) \S", line)]


def tail(output: str, lines: int = 25) -> str:
    return "\n".join("    " + line for line in output.splitlines()[-lines:])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Plant one-line bugs in a scratch copy and check that the tests catch them.",
    )
    parser.add_argument(
        "-k",
        dest="names",
        action="append",
        default=[],
        metavar="NAME",
        help="only mutants whose name contains NAME (repeatable)",
    )
    parser.add_argument(
        "--dialect",
        action="append",
        default=[],
        choices=DIALECTS,
        help="only mutants whose catchers run against this (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check that every original text occurs once, and exit",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="scratch copies run side by side (default 1)",
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the run of the unmodified tests"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="name the failing test of each caught mutant; print pytest's output for survivors",
    )
    return parser.parse_args(argv)


def baseline(scratches: queue.Queue[Path], chosen: Sequence[Mutant]) -> bool:
    """Run every chosen mutant's tests once on the unmodified copy; True when they pass."""
    tests = list(dict.fromkeys(t for m in chosen for t in m.tests))
    scratch = scratches.get()
    started = time.monotonic()
    try:
        code, output, counts = pytest_run(scratch, tests, stop_first=False)
    finally:
        scratches.put(scratch)
    if code != 0:
        print(f"baseline: the unmodified tests fail (exit code {code}); fix them first:")
        print(tail(output, 40))
        return False
    print(
        f"baseline: {counts.get('passed', 0)} passed on the unmodified tree "
        f"in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    return True


def run_all(
    scratches: queue.Queue[Path], chosen: Sequence[Mutant], jobs: int, verbose: bool
) -> list[Outcome]:
    printing = threading.Lock()
    width = max(len(m.name) for m in chosen)

    def one(mutant: Mutant) -> Outcome:
        scratch = scratches.get()
        try:
            outcome = run_mutant(scratch, mutant)
        finally:
            scratches.put(scratch)
        with printing:
            line = (
                f"{outcome.status:<8}  {mutant.name:<{width}}  "
                f"[{','.join(mutant.dialects)}]  {outcome.seconds:5.1f} s"
            )
            if outcome.detail:
                line += f"  ({outcome.detail})"
            print(line, flush=True)
            if outcome.status == "ERROR" or (outcome.status == "SURVIVED" and verbose):
                print(tail(outcome.output))
            elif outcome.status == "caught" and verbose:
                for failure in failures(outcome.output)[:1]:
                    print(f"    {failure}")
        return outcome

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, chosen))


def report(outcomes: Sequence[Outcome]) -> int:
    caught = sum(o.status == "caught" for o in outcomes)
    survived = [o for o in outcomes if o.status == "SURVIVED"]
    errors = [o for o in outcomes if o.status == "ERROR"]
    summary = f"mutants: {caught} caught, {len(survived)} survived of {len(outcomes)}"
    if errors:
        names = ", ".join(o.mutant.name for o in errors)
        summary += f" ({len(errors)} could not be judged: {names})"
    print(summary)
    for o in survived:
        print(f"  survived: {o.mutant.name}: {o.mutant.breaks} ({o.mutant.file})")
    return 0 if not survived and not errors else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wrong = problems(MUTANTS)
    if wrong:
        print("the mutant list does not match the tree:", file=sys.stderr)
        for line in wrong:
            print(f"  {line}", file=sys.stderr)
        return 2
    chosen = select(MUTANTS, args.names, args.dialect)
    if args.check:
        print(f"mutants: {len(MUTANTS)} listed, every original text occurs once")
        return 0
    if args.list:
        for m in chosen:
            print(f"{m.name}  [{','.join(m.dialects)}]  {m.file}: {m.breaks}")
            for test in m.tests:
                print(f"    {test}")
        return 0
    if not chosen:
        print("no mutant matches", file=sys.stderr)
        return 2

    jobs = max(1, min(args.jobs, len(chosen)))
    with tempfile.TemporaryDirectory(prefix="nsjq-mutants-") as parent:
        scratches: queue.Queue[Path] = queue.Queue()
        for index in range(jobs):
            scratches.put(make_scratch(Path(parent), index))
        copies = "copy" if jobs == 1 else "copies"
        print(f"mutants: {len(chosen)} to run, {jobs} scratch {copies} under {parent}", flush=True)
        if not args.no_baseline and not baseline(scratches, chosen):
            return 2
        outcomes = run_all(scratches, chosen, jobs, args.verbose)
    return report(outcomes)


if __name__ == "__main__":
    sys.exit(main())
