"""MySQL >= 8.0 and MariaDB >= 10.6: SKIP LOCKED and named locks, no LISTEN/NOTIFY.

The schema of ``db_gen <schema> <queue>`` is a MySQL database. The DDL has
no trigger: workers poll (or the socket server wakes them). It has a stored
procedure, the executors' claim, so its script uses the mysql client's
``DELIMITER`` lines; ``split_script`` turns it into statements for a driver.

Two server families, one template per file: lines between ``-- server:
mariadb`` (or ``mysql``) and ``-- server: end`` belong to that family's
rendering only (``for_server``). ``db_gen --server mariadb`` (the default)
renders what MariaDB runs cheapest (EXECUTE IMMEDIATE, user variables
assigned inside the batch claim's locking read); ``--server mysql`` renders
only syntax MySQL 8.0 keeps (PREPARE/EXECUTE, a cursor, SET), which MariaDB
runs too. Workers accept the claim procedure of either variant.
"""

from __future__ import annotations

import hashlib
import re

from nsj_queue_lib import model
from nsj_queue_lib.db.dialect import SERVER_FAMILIES, DdlNames, Dialect
from nsj_queue_lib.db.limited_routine import LimitsDialect, limited_claim_ddl, previous_claim_ddl
from nsj_queue_lib.db.mysql import limits
from nsj_queue_lib.db.mysql.claim_where import PAUSE_CLOCK, claim_where
from nsj_queue_lib.db.mysql.layout import HOT_DAY, LAYOUTS, layout_values
from nsj_queue_lib.db.mysql.lock_keys import lock_key_free
from nsj_queue_lib.db.sql_files import read_sql, render, sql_code

# The columns --upgrade adds to a table that lacks them (the same as on
# PostgreSQL); their definitions are read from ddl.sql, the single source.
UPGRADE_COLUMNS = (
    "prioridade",
    "dead",
    "live_id",
    "pub_sub",
    "publication_id",
    "subscriber_id",
    *model.EXTRA_COLUMNS,
    # Generated from dedupe_key and status: the unique index of unfinished dedupe keys.
    "dedupe_active",
    # Generated from lock_key and status: the unique index of running lock keys.
    "lock_key_running",
    # Generated from lock_key and status: the key index's status (indexes.sql).
    "lock_key_status",
    # Generated from fair_key and status: the fair key index's status (indexes.sql).
    "fair_key_status",
)

# The columns --upgrade adds to a limits table that lacks them: the pause
# (fleet/pause.py), the circuit breaker (fleet/breakers.py) and the per-key cap
# (max_concurrent_per_key), from limits_table.sql.
LIMITS_UPGRADE_COLUMNS = (
    "paused",
    "paused_until",
    "breaker_failures",
    "breaker_open",
    "breaker_until",
    "breaker_trial",
    "breaker_trial_at",
    "breaker_trial_task",
    "max_concurrent_per_key",
)

# The columns --upgrade adds to a subscriber table that lacks them: the subscriber's
# circuit breaker (fleet/subscriber_breakers.py), from subscriber_table.sql.
SUBSCRIBER_UPGRADE_COLUMNS = model.SUBSCRIBER_BREAKER_COLUMNS

# Indexes of an earlier release that held status, and no longer do (indexes.sql):
# --upgrade rebuilds them where their status column is still there.
REDEFINED_INDEXES = ("idx_chain", "idx_equivalent", "idx_lock_key")
# Unique indexes an earlier release made ascending, now descending (indexes.sql says
# why): --upgrade rebuilds them on a server that keeps the order of a descending index.
DESCENDING_INDEXES = ("idx_dedupe", "idx_lock_key_running")
# MariaDB 10.8+ and MySQL 8+ build descending indexes (MariaDB 10.6 reads DESC and builds
# an ascending one: rebuilding there would change nothing at every --upgrade).
_VERSION_NUMBER = (
    "CAST(SUBSTRING_INDEX(VERSION(), '.', 1) AS UNSIGNED) * 100"
    " + CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(VERSION(), '.', 2), '.', -1) AS UNSIGNED)"
)
KEEPS_DESCENDING = (
    f"(VERSION() LIKE '%MariaDB%' AND {_VERSION_NUMBER} >= 1008"
    f" OR VERSION() NOT LIKE '%MariaDB%' AND {_VERSION_NUMBER} >= 800)"
)

# The server families db_gen renders the MySQL dialect for (db_gen --server).
MARIADB_SERVER, MYSQL_SERVER = SERVER_FAMILIES
SERVERS = SERVER_FAMILIES
DEFAULT_SERVER = MARIADB_SERVER
_SERVER_LINE = re.compile(r"^\s*-- server: ([a-z]+)\s*$")
# The first statements of a MariaDB script: on MySQL its PREPARE fails (an unknown
# column whose name says what to do) before anything is changed.
_MARIADB_ONLY = (
    "-- db_gen --server mariadb (the default): for MariaDB 10.6+. On MySQL the next\n"
    "-- statements stop the script before it changes anything: use db_gen --server mysql.\n"
    "SET @nsjq_ddl = IF(VERSION() LIKE '%MariaDB%', 'DO 0', "
    "'DO `MariaDB script: print the MySQL one with db_gen --server mysql`');\n"
    "PREPARE nsjq_step FROM @nsjq_ddl;\n"
    "EXECUTE nsjq_step;\n"
    "DEALLOCATE PREPARE nsjq_step;"
)
_FOR_MYSQL = "-- db_gen --server mysql: for MySQL 8.0+ (and MariaDB 10.6+)."
SERVER_CHECKS = {MARIADB_SERVER: _MARIADB_ONLY, MYSQL_SERVER: _FOR_MYSQL}


def check_server(server: str) -> str:
    if server not in SERVERS:
        raise ValueError(f"unknown server family {server!r}; known: {', '.join(SERVERS)}")
    return server


def for_server(text: str, server: str) -> str:
    """``text`` for one server family: the lines of the other family's sections dropped,
    and every ``-- server:`` line."""
    check_server(server)
    out: list[str] = []
    section: str | None = None
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        match = _SERVER_LINE.match(line)
        if match is None:
            if section in (None, server):
                out.append(line)
            continue
        marker = match.group(1)
        if marker == "end" and section is not None:
            section = None
        elif marker in SERVERS and section in (None, *[s for s in SERVERS if s != marker]):
            section = marker
        else:
            raise ValueError(f"line {number}: '-- server: {marker}' where {section!r} is open")
    if section is not None:
        raise ValueError(f"'-- server: {section}' is never ended ('-- server: end')")
    return "".join(out)


_CREATE_INDEX = re.compile(r"^CREATE (?:UNIQUE )?INDEX (\w+) ON (\S+) \((.*)\);$", re.MULTILINE)
_DELIMITER_LINE = re.compile(r"^\s*DELIMITER\s+(\S+)\s*$", re.IGNORECASE | re.MULTILINE)


def _task_expressions(overrides: dict[str, str]) -> list[tuple[str, str]]:
    """(column, expression) of a task row, ``t`` being the row; ``overrides``: column -> expression."""
    expressions = {"payload_hash": "HEX(t.payload_hash)", **overrides}
    return [(c, expressions.get(c, f"t.{c}")) for c in model.CLAIMED_COLUMNS]


def _task_json(**overrides: str) -> str:
    """A task row as JSON_OBJECT arguments."""
    return ", ".join(f"'{c}', {e}" for c, e in _task_expressions(overrides))


def _task_values(**overrides: str) -> str:
    """A task row as JSON_ARRAY arguments: the values of CLAIMED_COLUMNS, in that order."""
    return ", ".join(e for _, e in _task_expressions(overrides))


# A claimed row as JSON_OBJECT arguments: one column instead of 29, because
# PyMySQL parses a column definition per column of every result. Times are
# text and the payload hash hex; the store converts them back.
TASK_JSON = _task_json(payload="COALESCE(t.payload, first_attempt.payload)")
# The same row as the set-based batch claim returns it: a JSON array of the
# values without their names (rows.claims_from_task_rows puts the names back),
# cheaper for the server to build and for the worker to parse, per claimed task.
# A task claimed alone stays an object: the previous release's workers call
# this release's procedure (previous_claim.sql) and read its keys.
TASK_VALUES = _task_values(payload="COALESCE(t.payload, first_attempt.payload)")
# The same row as the claim procedure's locking read builds it, before its
# UPDATE: status is what that UPDATE writes, and the payload of a later
# attempt is filled in from the first attempt afterwards.
CLAIMED_TASK_JSON = _task_json(status="'processando'")
CLAIMED_TASK_VALUES = _task_values(status="'processando'")
# What the limited claim procedure (limited_claim.sql) needs of this dialect; its lock_key
# condition is db/mysql/lock_keys.py's, as the other claims'.
LIMITS = LimitsDialect(
    name="mysql",
    now="NOW(6)",
    pause_clock=PAUSE_CLOCK,
    open_windows="p_open_windows",
    handled_processos="p_handled_processos",
    states=limits.STATES,
    previous_claim_version="nsj_queue_lib claim d8ff69fda4465378",
    routine_version_params=limits.routine_version_params,
    claim=limits.claim,
    lock_key_free=lock_key_free,
    claim_values={"claimed_task_json": CLAIMED_TASK_JSON},
)


def claim_procedure_version(server: str = DEFAULT_SERVER) -> str:
    """The claim procedure's COMMENT: changes whenever its code (or the row it returns) does.
    Each server family's variant has its own (the MariaDB one is that of the code before
    the variants: the MySQL sections are left out of its digest)."""
    source = (
        sql_code(for_server(read_sql("mysql", "claim_procedure.sql"), server))
        + CLAIMED_TASK_JSON
        + TASK_JSON
        + TASK_VALUES
        + CLAIMED_TASK_VALUES
        + claim_where("t", "l", after_position=True)
        + claim_where("t", "l", after_position=False)
    )
    digest = hashlib.sha256(source.encode()).hexdigest()
    return f"nsj_queue_lib claim {digest[:16]}"


def claim_procedure_versions() -> tuple[str, ...]:
    """The COMMENTs a worker accepts: the claim procedure of either server family's variant."""
    return tuple(claim_procedure_version(server) for server in SERVERS)


def split_script(script: str) -> list[str]:
    """The statements of a DDL script, as the mysql client would send them.

    Honours ``DELIMITER`` lines (the claim procedure's body holds ';') and
    drops comment lines. Generated DDL has no delimiter inside a literal.
    """
    statements: list[str] = []
    chunks = _DELIMITER_LINE.split(script)
    # chunks = [text, delimiter1, text, delimiter2, text, ...]
    delimiters = [";", *chunks[1::2]]
    for delimiter, text in zip(delimiters, chunks[0::2], strict=True):
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        statements.extend(part.strip() for part in code.split(delimiter) if part.strip())
    return statements


def column_definitions(ddl: str, table: str) -> dict[str, str]:
    """{column: definition} of ``CREATE TABLE <table> (...)`` in rendered DDL."""
    match = re.search(rf"^CREATE TABLE {re.escape(table)} \((.*?)\n\)", ddl, re.S | re.M)
    if match is None:
        raise ValueError(f"no CREATE TABLE {table} in the DDL")
    columns = {}
    for line in match.group(1).splitlines():
        found = re.match(r"^\s+([a-z_]+) (.+?),?$", line)
        if found:
            columns[found.group(1)] = found.group(2)
    return columns


def _sql_string(text: str) -> str:
    """``text`` inside a single-quoted SQL string literal."""
    return text.replace("\\", "\\\\").replace("'", "''")


class MysqlDialect(Dialect):
    name = "mysql"
    routine_kind = "PROCEDURE"
    server_families = SERVER_FAMILIES

    layouts = LAYOUTS

    def __init__(self, server: str = DEFAULT_SERVER, partitioned: bool = False):
        self.server = check_server(server)
        self.partitioned = partitioned

    def for_server(self, server: str) -> MysqlDialect:
        """This dialect rendering for the ``server`` family (``SERVERS``)."""
        return self if server == self.server else MysqlDialect(server, self.partitioned)

    def for_layout(self, layout: str) -> MysqlDialect:
        """This dialect rendering the ``layout`` of the queue table (db/mysql/layout.py)."""
        if layout not in LAYOUTS:
            raise ValueError(f"--layout is one of {', '.join(LAYOUTS)}, not {layout!r}")
        return MysqlDialect(self.server, partitioned=layout == "partitioned")

    def _values(self, names: DdlNames) -> dict[str, str]:
        values = names.template_values()
        values["day_trigger"] = f"{names.schema}.{values['day_trigger']}"
        values.update(layout_values(self.partitioned, values))
        values["server_check"] = SERVER_CHECKS[self.server]
        values["indexes"] = render(read_sql(self.name, "indexes.sql"), values).strip()
        values["subscriber_indexes"] = render(
            read_sql(self.name, "subscriber_indexes.sql"), values
        ).strip()
        hot_day = HOT_DAY if self.partitioned else None
        procedure_values = dict(
            values,
            claimed_task_json=CLAIMED_TASK_JSON,
            claimed_task_values=CLAIMED_TASK_VALUES,
            # The batch's row read, static and inside the string the other form is built from.
            task_values=TASK_VALUES,
            task_values_sql=_sql_string(TASK_VALUES),
            claim_procedure_version=claim_procedure_version(self.server),
            claimable=claim_where(values["table"], values["limits_table"], False, hot_day),
            claimable_after_position=claim_where(
                values["table"], values["limits_table"], True, hot_day
            ),
        )
        values["claim_procedure_ddl"] = render(
            for_server(read_sql(self.name, "claim_procedure.sql"), self.server), procedure_values
        ).strip()
        values["limited_claim_ddl"] = limited_claim_ddl(LIMITS, values)
        return values

    def _subscriber_table(self, values: dict[str, str], if_not_exists: bool) -> str:
        # The per-processo limits table (flow/limits.py) comes with the subscriber table.
        return "\n".join(
            self._table(name, values, if_not_exists)
            for name in ("subscriber_table.sql", "limits_table.sql")
        )

    def _workers_tables(self, values: dict[str, str], if_not_exists: bool) -> str:
        # The tally's tables (db/tally.py) come with the workers table: both serve nsjq status.
        return "\n".join(
            self._table(name, values, if_not_exists)
            for name in ("workers_table.sql", "tally_table.sql")
        )

    def _workflow_tables(
        self, values: dict[str, str], drop_release_procedure: str, if_not_exists: bool
    ) -> str:
        # The dependencies' tables and release procedure, then the workflows' tables.
        dependencies = dict(values, drop_release_procedure=drop_release_procedure)
        return "\n\n".join(
            (
                self._table("workflow_tables.sql", dependencies, if_not_exists),
                self._table("workflows_table.sql", values, if_not_exists),
                # Process instances (nsj_queue_lib/process/) build on the same tables.
                self._table("process_tables.sql", values, if_not_exists),
            )
        )

    def _table(self, filename: str, values: dict[str, str], if_not_exists: bool) -> str:
        table_values = dict(values, if_not_exists="IF NOT EXISTS " if if_not_exists else "")
        return render(read_sql(self.name, filename), table_values).strip()

    def create_ddl(self, names: DdlNames) -> str:
        values = self._values(names)
        values["subscriber_table_ddl"] = self._subscriber_table(values, if_not_exists=False)
        values["periodic_table_ddl"] = self._table("periodic_table.sql", values, False)
        values["workers_table_ddl"] = self._workers_tables(values, False)
        values["workflow_ddl"] = self._workflow_tables(values, "", False)
        return render(read_sql(self.name, "ddl.sql"), values)

    def upgrade_ddl(self, names: DdlNames) -> str:
        values = self._values(names)
        created = self.create_ddl(names)
        columns = column_definitions(created, values["table"])
        steps = [
            self._step(
                names,
                "columns",
                names.queue,
                "column_name",
                column,
                f"ALTER TABLE {values['table']} ADD COLUMN {column} {columns[column]}",
            )
            for column in UPGRADE_COLUMNS
        ]
        values["add_columns"] = "\n".join(steps)
        values["redefine_indexes"] = self._redefine_steps(names, values)
        values["add_indexes"] = self._index_steps(names, values["indexes"])
        values["subscriber_table_ddl"] = self._subscriber_table(values, if_not_exists=True)
        values["add_subscriber_indexes"] = self._index_steps(names, values["subscriber_indexes"])
        values["add_subscriber_columns"] = self._column_steps(
            names, created, values["subscriber_table"], SUBSCRIBER_UPGRADE_COLUMNS
        )
        limits_columns = column_definitions(created, values["limits_table"])
        values["add_limits_columns"] = "\n".join(
            self._step(
                names,
                "columns",
                values["limits_table"].split(".")[-1],
                "column_name",
                column,
                f"ALTER TABLE {values['limits_table']} ADD COLUMN {column} {limits_columns[column]}",
            )
            for column in LIMITS_UPGRADE_COLUMNS
        )
        values["add_limits_columns"] += "\n" + self._utc_pause_step(names, values)
        values["periodic_table_ddl"] = self._table("periodic_table.sql", values, True)
        values["workers_table_ddl"] = self._workers_tables(values, True)
        values["workflow_ddl"] = self._workflow_tables(
            values, f"DROP PROCEDURE IF EXISTS {values['release_function']};\n", True
        )
        values["add_workflow_columns"] = self._workflow_columns(names, values, created)
        values["previous_claim_ddl"] = previous_claim_ddl(LIMITS, names)
        return render(read_sql(self.name, "upgrade.sql"), values)

    def _column_steps(
        self, names: DdlNames, created: str, table: str, columns: tuple[str, ...]
    ) -> str:
        """An idempotent ``ADD COLUMN`` step for each of ``columns`` of ``table``, defined as
        in the created DDL."""
        definitions = column_definitions(created, table)
        return "\n".join(
            self._step(
                names,
                "columns",
                table.split(".")[-1],
                "column_name",
                column,
                f"ALTER TABLE {table} ADD COLUMN {column} {definitions[column]}",
            )
            for column in columns
        )

    def _workflow_columns(self, names: DdlNames, values: dict[str, str], created: str) -> str:
        """The edges' ``settled`` flag, which came after the first builds of dependencies
        between tasks (their edges count as unsettled)."""
        parents = values["parents_table"]
        definition = column_definitions(created, parents)["settled"]
        return self._step(
            names,
            "columns",
            parents.split(".")[-1],
            "column_name",
            "settled",
            f"ALTER TABLE {parents} ADD COLUMN settled {definition}",
        )

    def _index_steps(self, names: DdlNames, indexes_sql: str) -> str:
        """Each ``CREATE INDEX`` of ``indexes_sql`` (comments kept) as an idempotent step."""
        out = []
        for line in indexes_sql.splitlines():
            match = _CREATE_INDEX.match(line)
            if match is None:
                out.append(line)
                continue
            index, table, _ = match.groups()
            object_table = table.split(".")[-1]
            out.append(
                self._step(names, "statistics", object_table, "index_name", index, line.rstrip(";"))
            )
        return "\n".join(out)

    def _redefine_steps(self, names: DdlNames, values: dict[str, str]) -> str:
        """For each of REDEFINED_INDEXES: drop and add it again, in one statement, when it
        still has a status column (a table of an earlier release); the same for each of
        DESCENDING_INDEXES still ascending, where the server builds it descending."""
        created = {m.group(1): m.groups() for m in _CREATE_INDEX.finditer(values["indexes"])}
        rebuilds = [
            (values[key], "INDEX", " AND column_name = 'status') > 0") for key in REDEFINED_INDEXES
        ] + [
            (
                values[key],
                "UNIQUE INDEX",
                f" AND seq_in_index = 1 AND collation = 'A') > 0 AND {KEEPS_DESCENDING}",
            )
            for key in DESCENDING_INDEXES
        ]
        steps = []
        for name, kind, condition in rebuilds:
            index, table, columns = created[name]
            statement = f"ALTER TABLE {table} DROP INDEX {index}, ADD {kind} {index} ({columns})"
            steps.append(
                self._step(
                    names,
                    "statistics",
                    table.split(".")[-1],
                    "index_name",
                    index,
                    statement,
                    condition=condition,
                )
            )
        return "\n".join(steps)

    def _utc_pause_step(self, names: DdlNames, values: dict[str, str]) -> str:
        """An earlier release's ``paused_until`` TIMESTAMP made the UTC DATETIME(6) of
        limits_table.sql. The change converts each value through the session's time zone:
        the script's session is set to UTC around it (and given its own zone back)."""
        limits_table = values["limits_table"]
        step = self._step(
            names,
            "columns",
            limits_table.split(".")[-1],
            "column_name",
            "paused_until",
            f"ALTER TABLE {limits_table} MODIFY COLUMN paused_until datetime(6) NULL",
            condition=" AND data_type = 'timestamp') > 0",
        )
        return (
            "-- paused_until, a TIMESTAMP before: a UTC DATETIME(6), converted in UTC.\n"
            "SET @nsjq_time_zone = @@session.time_zone;\n"
            "SET time_zone = '+00:00';\n"
            f"{step}\n"
            "SET time_zone = @nsjq_time_zone;"
        )

    def _step(
        self,
        names: DdlNames,
        catalog: str,
        object_table: str,
        name_column: str,
        object_name: str,
        statement: str,
        condition: str = ") = 0",
    ) -> str:
        """Run ``statement`` when the catalog's rows for the object, counted, meet
        ``condition`` (by default: when there are none, the object is missing)."""
        return render(
            read_sql(self.name, "upgrade_step.sql"),
            {
                "condition": condition,
                "catalog": catalog,
                "schema": names.schema,
                "object_table": object_table,
                "name_column": name_column,
                "object_name": object_name,
                "statement": _sql_string(statement),
            },
        ).strip()


DIALECT = MysqlDialect()
