"""The test project's task functions. ``db``: the database (and the task backend: the test
settings give each database a backend of the same alias) the function writes to."""

from __future__ import annotations

import datetime

from django.db import transaction
from django.utils import timezone

from nsj_queue_lib.contrib.django.compat import task
from tests.django_project.models import Note


@task
def record(key: str, data: object = None, db: str = "default") -> dict:
    """One note, saved twice (the second save changes nothing: on MySQL, Django needs the
    matched row count to see it updated), read back through the ORM."""
    notes = Note.objects.using(db)
    note = notes.create(key=key, data=data, at=timezone.now(), kept=datetime.time(7, 30))
    note.save(using=db)
    with transaction.atomic(using=db):  # a savepoint inside the task's transaction
        again = notes.get(pk=note.pk)
    return {
        "key": key,
        "data": again.data,
        "kept": again.kept.isoformat(),
        "notes": notes.filter(key=key).count(),
    }


@task
def fail(key: str, db: str = "default") -> None:
    """Writes a note, then raises: the note must roll back."""
    Note.objects.using(db).create(key=key, at=timezone.now())
    raise ValueError(f"failing on purpose: {key}")


@task(takes_context=True, priority=7)
def with_context(context, key: str, db: str = "default") -> dict:
    Note.objects.using(db).create(key=key, at=timezone.now())
    return {"attempt": context.attempt, "id": context.task_result.id}


@task
async def arecord(key: str, db: str = "default") -> str:
    await Note.objects.using(db).acreate(key=key, at=timezone.now())
    return key


@task
def enqueue_follow_up(key: str, db: str = "default") -> str:
    """Enqueues another task from inside a task: in the same transaction."""
    return record.using(backend=db).enqueue(f"{key}-follow-up", db=db).id
