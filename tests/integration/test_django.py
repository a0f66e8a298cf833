"""nsj_queue_lib.contrib.django with a real Django project (tests/django_project) on
PostgreSQL and MariaDB: enqueue in Django's transaction, an in-process worker runs the
task functions on its connection, and the results read back through Django's API.

Django is the ``django`` extra (make venv installs it): without it the module skips,
and fails under CI=true.
"""

from __future__ import annotations

import datetime
import os
import secrets
import signal
import subprocess
import sys

import pytest

from tests.helpers.databases import create_queue, drop_queue, unique_queue_name
from tests.helpers.django_support import require_django
from tests.helpers.mysql_queue import create_queue as create_mysql_queue
from tests.helpers.mysql_queue import drop_queue_tables
from tests.helpers.processes import QUIET_SETTINGS, ROOT, InProcessWorker, wait_for

require_django()

import django  # noqa: E402 - after the check above

# One pytest-xdist worker: the session's Django settings and notes table are its own.
pytestmark = pytest.mark.xdist_group("django")

NOTES = f"nsjq_django_note_{secrets.token_hex(4)}"
KINDS = [
    pytest.param("postgres", id="postgres"),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


class Rollback(Exception):
    pass


@pytest.fixture(scope="module")
def project(pg_dsn):
    """Django set up on tests/django_project, its notes table created on each database."""
    os.environ["NSJQ_DJANGO_PG_DSN"] = pg_dsn
    os.environ["NSJQ_DJANGO_NOTE_TABLE"] = NOTES
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.django_project.settings"
    django.setup()
    from django.db import connections

    from tests.django_project.models import Note

    made = []
    for alias in connections:
        with connections[alias].schema_editor() as editor:
            editor.create_model(Note)
        made.append(alias)
    try:
        yield
    finally:
        for alias in made:
            with connections[alias].schema_editor() as editor:
                editor.delete_model(Note)
        connections.close_all()


@pytest.fixture(params=KINDS)
def queue(request, project, pg_admin):
    """(backend alias, queue table): a fresh queue table, the backend pointed at it."""
    from django.test import override_settings

    from tests.django_project import settings

    if request.param == "postgres":
        made = create_queue(pg_admin, "")
        alias, key, dropped = "default", "TABLE", lambda: drop_queue(pg_admin, made)
    else:
        admin = request.getfixturevalue("mysql_admin")
        if "mysql" not in settings.DATABASES:
            pytest.fail("TEST_MYSQL_DSN was set after Django read its settings")
        made = create_mysql_queue(admin, settings.DATABASES["mysql"]["NAME"])
        alias, key = "mysql", "TABLE"

        def dropped():
            drop_queue_tables(admin, made.database, made.name)

    tasks = {
        name: {**conf, "OPTIONS": dict(conf["OPTIONS"])} for name, conf in settings.TASKS.items()
    }
    tasks[alias]["OPTIONS"][key] = made.table
    try:
        with override_settings(TASKS=tasks):
            yield alias, made.table
    finally:
        dropped()


def start_worker(alias: str, **changes):
    from nsj_queue_lib.contrib.django.worker import DjangoTaskWorker, worker_settings

    settings = worker_settings(alias).with_changes(
        **{**QUIET_SETTINGS, "queue_poll_interval": 0.05, **changes}
    )
    return InProcessWorker(DjangoTaskWorker(settings, alias)).start()


def finished(alias: str, result_id: str, timeout: float = 30):
    from nsj_queue_lib.contrib.django.compat import task_backends

    def done():
        result = task_backends[alias].get_result(result_id)
        return result if result.is_finished else None

    return wait_for(done, timeout, f"task {result_id} to finish")


def rows(alias: str, table: str) -> list[dict]:
    from django.db import connections

    with connections[alias].cursor() as cur:
        cur.execute(f"SELECT status, prioridade, processo, data_hora FROM {table} ORDER BY id")
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def notes(alias: str, key: str) -> int:
    from tests.django_project.models import Note

    return Note.objects.using(alias).filter(key=key).count()


def test_a_rolled_back_enqueue_leaves_no_task(queue):
    from django.db import transaction

    from nsj_queue_lib.contrib.django.compat import TaskResultDoesNotExist
    from tests.django_project.tasks import record

    alias, table = queue
    with pytest.raises(Rollback), transaction.atomic(using=alias):
        result = record.using(backend=alias).enqueue("rolled-back")
        assert rows(alias, table)  # written in the open transaction
        raise Rollback
    assert rows(alias, table) == []
    with pytest.raises(TaskResultDoesNotExist):
        record.using(backend=alias).get_result(result.id)


def test_a_committed_task_runs_once_on_the_workers_transaction(queue):
    from django.db import transaction

    from nsj_queue_lib.contrib.django.compat import TaskResultStatus
    from tests.django_project.tasks import record

    alias, table = queue
    key = f"k-{secrets.token_hex(3)}"
    worker = start_worker(alias)
    try:
        with transaction.atomic(using=alias):
            result = record.using(backend=alias).enqueue(key, {"list": [1, 2], "n": None}, db=alias)
            assert result.status == TaskResultStatus.READY
        done = finished(alias, result.id)
    finally:
        assert worker.stop() == 0
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {
        "key": key,
        "data": {"list": [1, 2], "n": None},
        "kept": "07:30:00",
        "notes": 1,
    }
    assert done.args == [key, {"list": [1, 2], "n": None}] and done.kwargs == {"db": alias}
    assert len(done.worker_ids) == 1 and done.errors == []
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert notes(alias, key) == 1
    [row] = rows(alias, table)
    assert row["status"] == "sucesso"
    assert row["processo"] == "tests.django_project.tasks.record"
    assert row["prioridade"] == 100  # Django's default priority, 0


def test_a_failing_task_rolls_back_its_writes_and_reports_the_error(queue):
    from nsj_queue_lib.contrib.django.compat import TaskResultStatus
    from tests.django_project.tasks import fail

    alias, _ = queue
    key = f"f-{secrets.token_hex(3)}"
    worker = start_worker(alias, queue_max_retry=1)
    try:
        result = fail.using(backend=alias).enqueue(key, db=alias)  # autocommit: written at once
        done = finished(alias, result.id)
    finally:
        assert worker.stop() == 0
    assert done.status == TaskResultStatus.FAILED
    [error] = done.errors
    assert error.exception_class is ValueError
    assert f"failing on purpose: {key}" in error.traceback
    assert notes(alias, key) == 0
    with pytest.raises(ValueError, match="failed"):
        done.return_value  # noqa: B018 - Django's TaskResult raises for a failed task


def test_context_priority_async_and_a_task_enqueued_by_a_task(queue):
    from django.utils import timezone

    from nsj_queue_lib.contrib.django.compat import TaskResultStatus
    from tests.django_project.tasks import arecord, enqueue_follow_up, record, with_context

    alias, table = queue
    key = f"c-{secrets.token_hex(3)}"
    later = timezone.now() + datetime.timedelta(hours=1)
    deferred = record.using(backend=alias, run_after=later).enqueue(f"{key}-later", db=alias)
    worker = start_worker(alias)
    try:
        contextual = with_context.using(backend=alias).enqueue(key, db=alias)
        coroutine = arecord.using(backend=alias).enqueue(f"{key}-async", db=alias)
        parent = enqueue_follow_up.using(backend=alias).enqueue(key, db=alias)
        assert finished(alias, contextual.id).return_value == {
            "attempt": 1,
            "id": contextual.id,
        }
        assert finished(alias, coroutine.id).return_value == f"{key}-async"
        child_id = finished(alias, parent.id).return_value
        assert finished(alias, child_id).status == TaskResultStatus.SUCCESSFUL
        assert record.using(backend=alias).get_result(deferred.id).status == "READY"
    finally:
        assert worker.stop() == 0
    assert notes(alias, f"{key}-async") == 1 and notes(alias, f"{key}-follow-up") == 1
    first, *_ = rows(alias, table)  # the deferred task: enqueued first, not run
    assert first["status"] == "pendente"
    due = first["data_hora"]  # MariaDB's DATETIME(6) holds UTC, read naive
    due = due if due.tzinfo else due.replace(tzinfo=datetime.timezone.utc)
    assert abs(due - later) < datetime.timedelta(milliseconds=1)
    assert record.using(backend=alias).get_result(deferred.id).task.run_after == later
    by_processo = {r["processo"].rpartition(".")[2]: r for r in rows(alias, table)}
    assert by_processo["with_context"]["prioridade"] == 107  # priority=7


@pytest.mark.slow
def test_manage_py_nsjq_worker_runs_the_tasks_and_stops_on_sigterm(project, pg_admin, pg_dsn):
    from django.db import connections
    from django.test import override_settings

    from nsj_queue_lib.contrib.django.compat import TaskResultStatus
    from tests.django_project import settings
    from tests.django_project.tasks import record

    made = create_queue(pg_admin, "", unique_queue_name("dj_"))
    env = dict(os.environ, NSJQ_DJANGO_PG_TABLE=made.table, PYTHONUNBUFFERED="1")
    env.update(QUEUE_WAIT_NOTIFY_INTERVAL="1", QUEUE_RETRY_THREAD_INTERVAL="3600")
    tasks = {**settings.TASKS, "default": {**settings.TASKS["default"]}}
    tasks["default"]["OPTIONS"] = {"TABLE": made.table}
    manage = ROOT / "tests" / "django_project" / "manage.py"
    proc = subprocess.Popen(
        [sys.executable, str(manage), "nsjq_worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with override_settings(TASKS=tasks):
            result = record.enqueue(f"m-{secrets.token_hex(3)}")
            assert finished("default", result.id, timeout=60).status == TaskResultStatus.SUCCESSFUL
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        connections.close_all()
        drop_queue(pg_admin, made)
