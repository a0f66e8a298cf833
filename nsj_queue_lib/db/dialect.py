"""The queue's DDL per database, and the names it derives from (schema, queue).

A ``Dialect`` renders what ``db_gen`` prints (``db.driver.get_dialect`` finds it). Everything a running worker
needs of a database is its driver's (``db/driver.py``).
"""

from __future__ import annotations

import abc
import dataclasses
import zlib

from nsj_queue_lib.exceptions import ClaimRoutineError, InvalidIdentifierError
from nsj_queue_lib.identifiers import check_identifier, check_table_name, split_table_name

DIALECT_NAMES = ("postgres", "mysql", "singlestore")
# The server families the mysql dialect renders its DDL for (db_gen --server):
# MariaDB's (the default) and MySQL 8's, which MariaDB runs too.
SERVER_FAMILIES = ("mariadb", "mysql")
UPGRADE_HINT = "python -m nsj_queue_lib.db_gen <schema> <queue> --dialect <dialect> --upgrade"

# The claim routine's release: workers call claim_next_<queue>_v<N>. Bump it whenever a
# release changes the claim SQL (tests/unit/test_claim_routine_release.py pins the SQL to
# N and says so): db_gen --upgrade then adds the new routine next to the previous
# release's, whose workers keep calling theirs during a rolling upgrade
# (docs/upgrading.md, "Between releases"). Release 1, the first of this library, named
# its routine claim_next_<queue>.
CLAIM_ROUTINE_RELEASE = 2


@dataclasses.dataclass(frozen=True)
class DdlNames:
    """Every name the DDL of one queue uses, derived from (schema, queue)."""

    schema: str
    queue: str

    def __post_init__(self) -> None:
        check_identifier(self.schema, "schema")
        check_identifier(self.queue, "queue name")
        for name in self.object_names().values():
            check_identifier(name, "derived name")

    @staticmethod
    def routine_name(queue: str, release: int = CLAIM_ROUTINE_RELEASE) -> str:
        """The claim function's (procedure's on MySQL) name of ``release``, without its schema.

        At most 14 characters longer than the queue name (for N < 100,000), less than
        the longest index name, so it fits wherever DdlNames accepts the queue.
        """
        return f"claim_next_{queue}" if release == 1 else f"claim_next_{queue}_v{release}"

    @staticmethod
    def limited_routine_name(queue: str, release: int = CLAIM_ROUTINE_RELEASE) -> str:
        """The limited claim's function (procedure on MySQL) of ``release``, without its
        schema (per-processo limits; release 2 added it). 17 characters longer than the
        queue name, less than the longest index name."""
        return f"claim_limited_{queue}_v{release}"

    @staticmethod
    def settle_routine_name(queue: str, release: int = CLAIM_ROUTINE_RELEASE) -> str:
        """The function that settles a commit group's successes (PostgreSQL), without its
        schema; shorter than the claim function's name."""
        return f"settle_{queue}_v{release}"

    def old_routine_names(self) -> dict[int, str]:
        """{release: name} of the claim routines of earlier releases, with the schema."""
        return {
            release: f"{self.schema}.{self.routine_name(self.queue, release)}"
            for release in range(1, CLAIM_ROUTINE_RELEASE)
        }

    def object_names(self) -> dict[str, str]:
        q = self.queue
        return {
            "idx_claim": f"idx_{q}_claim",
            "idx_due": f"idx_{q}_due",
            "idx_scheduled": f"idx_{q}_scheduled",
            "idx_running": f"idx_{q}_running",
            "idx_data_hora": f"idx_{q}_data_hora",
            "idx_chain": f"idx_{q}_chain",
            "idx_attempts": f"idx_{q}_attempts",
            "idx_equivalent": f"idx_{q}_equivalent",
            "idx_dedupe": f"idx_{q}_dedupe",
            "idx_lock_key": f"idx_{q}_lock_key",
            "idx_lock_key_running": f"idx_{q}_lock_key_running",
            "idx_subscriber": f"idx_{q}_subscriber_processo",
            "idx_processo": f"idx_{q}_processo",
            "idx_aguardando": f"idx_{q}_aguardando",
            "idx_fair_key": f"idx_{q}_fair_key",
            "limits": f"{q}_limits",
            "subscriber": f"{q}_subscriber",
            "periodic": periodic_table_name(q),
            "workers": workers_table_name(q),
            "groups": groups_table_name(q),
            "tally": tally_table_names(q)[0],
            "tally_open": tally_table_names(q)[1],
            "tally_state": tally_table_names(q)[2],
            "function": f"notify_{q}_insert",
            "claim_function": self.routine_name(q),
            "limited_claim": self.limited_routine_name(q),
            "settle_function": self.settle_routine_name(q),
            "trigger_name": f"trigger_insert_{q}",
            # wait_for_task's wake-up (db/postgres/end_trigger.sql).
            "end_function": f"notify_{q}_end",
            "end_trigger": f"trigger_end_{q}",
            # Dependencies between tasks (nsj_queue_lib/workflow/).
            "parents": parents_table_name(q),
            "waiting": waiting_table_name(q),
            "idx_parents_child": f"idx_{q}_parents_child",
            "release_function": release_routine_name(q),
            # Workflows (nsj_queue_lib/workflow/builder.py).
            "workflows": workflows_table_name(q),
            "workflow_tasks": workflow_tasks_table_name(q),
            "idx_workflow_task": f"idx_{q}_workflow_task",
            # Durable steps and waits (nsj_queue_lib/workflow/steps.py, waits.py).
            "steps": steps_table_name(q),
            "events": events_table_name(q),
            "idx_events_task": f"idx_{q}_events_task",
            # Process instances (nsj_queue_lib/process/).
            "processes": processes_table_name(q),
            "process_tasks": process_tasks_table_name(q),
            "process_events": process_events_table_name(q),
            "idx_process_tasks": f"idx_{q}_process_tasks",
            "idx_process_events": f"idx_{q}_process_events",
            "idx_process_removal": f"idx_{q}_process_removal",
            # The partitioned layout's (db/postgres/layout.py).
            "day_function": f"finished_day_{q}",
            "day_trigger": f"trigger_finished_day_{q}",
        }

    def template_values(self) -> dict[str, str]:
        names = self.object_names()
        values = dict(names)
        values["table"] = f"{self.schema}.{self.queue}"
        values["subscriber_table"] = f"{self.schema}.{names['subscriber']}"
        values["periodic_table"] = f"{self.schema}.{names['periodic']}"
        values["workers_table"] = f"{self.schema}.{names['workers']}"
        values["groups_table"] = f"{self.schema}.{names['groups']}"
        for kind in ("tally", "tally_open", "tally_state"):
            values[f"{kind}_table"] = f"{self.schema}.{names[kind]}"
        values["limits_table"] = f"{self.schema}.{names['limits']}"
        values["function"] = f"{self.schema}.{names['function']}"
        values["claim_function"] = f"{self.schema}.{names['claim_function']}"
        values["limited_claim"] = f"{self.schema}.{names['limited_claim']}"
        values["settle_function"] = f"{self.schema}.{names['settle_function']}"
        values["day_function"] = f"{self.schema}.{names['day_function']}"
        values["parents_table"] = f"{self.schema}.{names['parents']}"
        values["waiting_table"] = f"{self.schema}.{names['waiting']}"
        values["release_function"] = f"{self.schema}.{names['release_function']}"
        values["workflows_table"] = f"{self.schema}.{names['workflows']}"
        values["workflow_tasks_table"] = f"{self.schema}.{names['workflow_tasks']}"
        values["steps_table"] = f"{self.schema}.{names['steps']}"
        values["events_table"] = f"{self.schema}.{names['events']}"
        for kind in ("processes", "process_tasks", "process_events"):
            values[f"{kind}_table"] = f"{self.schema}.{names[kind]}"
        values["channel"] = notify_channel(self.queue)
        values["end_function"] = f"{self.schema}.{names['end_function']}"
        values["end_channel"] = task_end_channel(self.queue)
        values["end_lock_key"] = str(task_end_lock_key(self.queue))
        values["schema"] = self.schema
        values["queue"] = self.queue
        return values


def periodic_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_periodic``: the last slot enqueued per periodic processo
    (``flow/periodic.py``), next to the queue table."""
    return f"{queue_table}_periodic"


def tally_table_names(queue_table: str) -> tuple[str, str, str]:
    """``[schema.]<queue>_tally``, ``_tally_open`` and ``_tally_state``: the counts of the
    finished attempts that ``nsjq status`` reads (db/tally.py), next to the queue table."""
    return (f"{queue_table}_tally", f"{queue_table}_tally_open", f"{queue_table}_tally_state")


def parents_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_parents``: one row per (parent, child) of a task inserted with
    ``after=`` (nsj_queue_lib/workflow/), next to the queue table."""
    return f"{queue_table}_parents"


def waiting_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_waiting``: each 'aguardando' child's count of unfinished parents."""
    return f"{queue_table}_waiting"


def workflows_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_workflows``: one row per ``Workflow`` enqueued (its name)."""
    return f"{queue_table}_workflows"


def workflow_tasks_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_workflow_tasks``: each workflow's tasks, in the order added."""
    return f"{queue_table}_workflow_tasks"


def steps_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_steps``: the checkpoints of durable steps and waits, one row per
    (task, step name), kept across the task's attempts (nsj_queue_lib/workflow/steps.py)."""
    return f"{queue_table}_steps"


def events_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_events``: the events sent to tasks (``QueueClient.send_event``)."""
    return f"{queue_table}_events"


def limits_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_limits`` for the queue table ``[schema.]<queue>``."""
    schema, dot, table = queue_table.rpartition(".")
    return f"{schema}{dot}{table}_limits"


def processes_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_processes``: one row per process instance (its state, status,
    detail, pending timer), next to the queue table (nsj_queue_lib/process/)."""
    return f"{queue_table}_processes"


def process_tasks_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_process_tasks``: each task of a process (its first attempt's id),
    its kind ('start', 'call', 'repair', 'timer') and its handler's response."""
    return f"{queue_table}_process_tasks"


def process_events_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_process_events``: a process's event history (``emit``)."""
    return f"{queue_table}_process_events"


def release_routine_name(queue_table: str) -> str:
    """``[schema.]release_<queue>``: the routine that releases a settled parent's children."""
    schema, _, table = queue_table.rpartition(".")
    return f"{schema}.release_{table}" if schema else f"release_{table}"


def workers_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_workers``: the workers running on the queue and the processos each
    claims (runtime/registry.py), next to the queue table."""
    return f"{queue_table}_workers"


def groups_table_name(queue_table: str) -> str:
    """``[schema.]<queue>_groups``: the commit groups holding their tasks unwritten
    (QUEUE_ONE_WRITE, db/postgres/groups_table.sql), next to the queue table."""
    return f"{queue_table}_groups"


def claim_routine_name(queue_table: str, release: int = CLAIM_ROUTINE_RELEASE) -> str | None:
    """``[schema.]claim_next_<table>_v<N>``: the claim function (PostgreSQL) or procedure
    (MySQL) of release ``N`` that db_gen creates.

    None when that name would not be a valid identifier (a long table name):
    ``db_gen`` refuses such a queue, and a store's ``bind`` says why.
    """
    schema, table = split_table_name(queue_table)
    name = DdlNames.routine_name(table, release)
    try:
        check_identifier(name, "claim routine")
    except InvalidIdentifierError:
        return None
    return f"{schema}.{name}" if schema else name


def settle_routine_name(queue_table: str) -> str | None:
    """``[schema.]settle_<table>_v<N>``: the group settle function db_gen creates next to the
    claim function (PostgreSQL); None where the claim function's name would be too long."""
    if claim_routine_name(queue_table) is None:
        return None
    schema, table = split_table_name(queue_table)
    name = DdlNames.settle_routine_name(table)
    return f"{schema}.{name}" if schema else name


def limited_routine_name(queue_table: str) -> str | None:
    """``[schema.]claim_limited_<table>_v<N>``: the limited claim routine db_gen creates
    (None when the name would be too long: db_gen refuses such a queue)."""
    schema, table = split_table_name(queue_table)
    name = DdlNames.limited_routine_name(table)
    try:
        check_identifier(name, "limited claim routine")
    except InvalidIdentifierError:
        return None
    return f"{schema}.{name}" if schema else name


def notify_channel(queue_name: str) -> str:
    """The notification channel of a queue: its name in lower case.

    An unquoted ``NOTIFY Fila, 'HALT'`` typed by an operator folds to lower
    case, so the trigger and the workers use the folded name too.
    """
    return queue_name.lower()


def task_end_channel(queue_name: str) -> str:
    """The channel that tells a waited-for task's end (PostgreSQL): the queue's, + '_end'."""
    return f"{notify_channel(queue_name)}_end"


def task_end_lock_key(queue_name: str) -> int:
    """The first key of the advisory locks by which ``wait_for_task`` says it waits
    (PostgreSQL; the second is the task's id): a 32-bit hash of the queue's name, so the
    trigger and every client agree on it without asking the database. A collision with
    another lock's key costs a NOTIFY for nothing, or the waiter polls."""
    return zlib.crc32(f"nsjq task end {notify_channel(queue_name)}".encode()) - 2**31


def check_claim_routine_version(
    routine: str, found: str | None, expected: str | tuple[str, ...]
) -> None:
    """Raise ``ClaimRoutineError`` unless the database's claim routine is this version's
    (``expected``: its version, or the versions of its variants, any of which will do)."""
    accepted = (expected,) if isinstance(expected, str) else expected
    if found in accepted:
        return
    state = "is missing" if found is None else f"is from another version ({found!r})"
    needs = " or ".join(repr(version) for version in accepted)
    raise ClaimRoutineError(
        f"the queue's claim routine {routine} {state}; this worker needs {needs}. "
        f"Bring the queue up to date with {UPGRADE_HINT} (run its output once), then start "
        "the worker again"
    )


def missing_columns_error(queue_table: str, cause: BaseException) -> ClaimRoutineError:
    """A queue table without the columns this version writes: a schema to upgrade."""
    return ClaimRoutineError(
        f"the queue table {queue_table} lacks columns this worker needs ({cause}). "
        f"Bring the queue up to date with {UPGRADE_HINT} (run its output once), then start "
        "the worker again"
    )


class Dialect(abc.ABC):
    name: str

    @abc.abstractmethod
    def create_ddl(self, names: DdlNames) -> str:
        """DDL that creates the queue, its subscriber table, indexes and notify path."""

    @abc.abstractmethod
    def upgrade_ddl(self, names: DdlNames) -> str:
        """Idempotent DDL bringing an nsj-queue-lib 1.2.2 queue to the current schema."""

    def drop_old_routines_ddl(self, names: DdlNames) -> str:
        """DDL dropping the claim routines of earlier releases (once their workers are gone)."""
        return "".join(
            f"DROP {self.routine_kind} IF EXISTS {name}{self.old_routine_arguments(release)};\n"
            for release, name in names.old_routine_names().items()
        )

    routine_kind = "FUNCTION"
    # The server families it renders its DDL for (``for_server``); none but the default.
    server_families: tuple[str, ...] = ()

    # The table layouts it renders (``for_layout``); SingleStore has only the plain one.
    layouts: tuple[str, ...] = ("plain",)

    def for_layout(self, layout: str) -> Dialect:
        """This dialect rendering the ``layout`` of the queue table (``layouts``)."""
        if layout == "plain":
            return self
        raise ValueError(
            f"--layout {layout} applies to the postgres and mysql dialects only, not {self.name}"
        )

    def for_server(self, server: str) -> Dialect:
        """This dialect rendering for the ``server`` family (``server_families``); only the
        mysql dialect has more than one."""
        raise ValueError(f"--server applies to the mysql dialect only, not {self.name}")

    def old_routine_arguments(self, release: int) -> str:
        """What DROP needs after an earlier release's routine name (PostgreSQL: its arguments)."""
        return ""


def check_store_tables(queue_table: str, subscriber_table: str | None) -> None:
    check_table_name(queue_table, "queue table")
    if subscriber_table is not None:
        check_table_name(subscriber_table, "subscriber table")
