"""The backend's ``OPTIONS``: which database and which queue table each Django queue uses.

Checked when Django builds the backend (the first use of ``task_backends[alias]``):
a mistake raises ``ImproperlyConfigured`` naming the backend and the option, before
any task is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from nsj_queue_lib.identifiers import check_table_name
from nsj_queue_lib.model import TEXT_LIMITS

KNOWN = ("DATABASE", "TABLE", "TABLES", "SUBSCRIBER_TABLE", "ORIGEM", "PROCESSO")
DEFAULT_ORIGEM = "django"


@dataclasses.dataclass(frozen=True)
class QueueOptions:
    database: str  # the alias in DATABASES whose connection (and transaction) enqueue uses
    tables: Mapping[str, str]  # Django queue name -> queue table
    default_table: str | None  # the table of any other queue name
    subscriber_table: str | None
    origem: str
    processo: str | None  # None: each task's module path

    def table_for(self, queue_name: str) -> str | None:
        return self.tables.get(queue_name, self.default_table)


def read_options(alias: str, queues: Collection[str], options: Mapping[str, Any]) -> QueueOptions:
    """The checked ``OPTIONS`` of backend ``alias``, whose ``QUEUES`` are ``queues``."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    unknown = sorted(set(options) - set(KNOWN))
    if unknown:
        raise ImproperlyConfigured(f"{where}: unknown option(s) {unknown}; known: {list(KNOWN)}")
    if not settings.USE_TZ:
        # Run times and results are instants: naive datetimes would need the session's zone.
        raise ImproperlyConfigured(f"{alias!r}: nsj_queue_lib's task backend needs USE_TZ = True")
    database = options.get("DATABASE", "default")
    if database not in settings.DATABASES:
        raise ImproperlyConfigured(f"{where}['DATABASE']: {database!r} is not in DATABASES")
    tables = options.get("TABLES", {})
    if not isinstance(tables, Mapping):
        raise ImproperlyConfigured(f"{where}['TABLES'] must map queue names to tables")
    checked = {str(name): _table(f"{where}['TABLES'][{name!r}]", t) for name, t in tables.items()}
    default = options.get("TABLE")
    default_table = None if default is None else _table(f"{where}['TABLE']", default)
    missing = sorted(q for q in queues if q not in checked and default_table is None)
    if missing or (not queues and default_table is None):
        raise ImproperlyConfigured(
            f"{where}: no table for the queue(s) {missing or ['(any)']}: give TABLE, or TABLES "
            "with an entry per queue name"
        )
    subscriber = options.get("SUBSCRIBER_TABLE")
    return QueueOptions(
        database=database,
        tables=checked,
        default_table=default_table,
        subscriber_table=None
        if subscriber is None
        else _table(f"{where}['SUBSCRIBER_TABLE']", subscriber),
        origem=_text(f"{where}['ORIGEM']", options.get("ORIGEM", DEFAULT_ORIGEM), "origem"),
        processo=None
        if options.get("PROCESSO") is None
        else _text(f"{where}['PROCESSO']", options["PROCESSO"], "processo"),
    )


def _table(where: str, value: Any) -> str:
    try:
        return check_table_name(value, where)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(str(exc)) from None


def _text(where: str, value: Any, column: str) -> str:
    limit = TEXT_LIMITS[column]
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise ImproperlyConfigured(f"{where} must be a non-empty string of at most {limit} chars")
    return value
