"""PostgreSQL DDL: the queue table, its indexes, notify trigger and claim function."""

from __future__ import annotations

import hashlib

from nsj_queue_lib.db.conditions import lock_key_free
from nsj_queue_lib.db.dialect import DdlNames, Dialect
from nsj_queue_lib.db.limited_routine import limited_claim_ddl, previous_claim_ddl
from nsj_queue_lib.db.postgres import claim_sets
from nsj_queue_lib.db.postgres.deliveries import deliverable
from nsj_queue_lib.db.postgres.layout import HOT_DAY, LAYOUTS, layout_values
from nsj_queue_lib.db.postgres.limits import LIMITS
from nsj_queue_lib.db.sql_files import read_sql, render, sql_code

# The claim function's argument types (claim_function.sql), as in DROP/COMMENT ON FUNCTION.
CLAIM_FUNCTION_ARGS = "(bigint, text, integer, integer, integer, varchar[], varchar[], varchar)"
# ... and those of earlier releases' claim functions, by release (dialect.CLAIM_ROUTINE_RELEASE).
OLD_CLAIM_FUNCTION_ARGS = {1: "(bigint, text, integer, integer, integer)"}

# What the claims put in {lock_key_free}: the candidate row is q (claim_function.sql).
CLAIM_NOW = "clock_timestamp()"


def _lock_key_free(table: str, hot_day: int | None = None) -> str:
    # The running keys read once per claim (claim_sets.py), the rest db/conditions.py's.
    return lock_key_free(table, "q", CLAIM_NOW, key_idle=claim_sets.KEY_IDLE, hot_day=hot_day)


# The claim function's claim in the window (claim_function.sql): the claim index from the
# first ready row (top_*) to the window's last (edge_*), both of one prioridade. Equality
# on the index's first column and row comparisons on the next two are bounds of the index
# scan, which starts at the first ready row (not at the index's start, past the entries a
# held snapshot keeps) and stops at the edge: the same walk as the whole one, in the same
# order, only shorter.
CLAIM_IN_WINDOW = (
    "q.prioridade = edge_prioridade"
    " AND (q.data_hora, q.id) BETWEEN (top_data_hora, top_id) AND (edge_data_hora, edge_id)"
)

# The claims from the session's position (claim_function.sql): the rest of the position's
# prioridade, from the position on; after a look-up, the position is its first ready row.
# The same bounds of the index scan, from below.
CLAIM_AFTER_POSITION = (
    "q.prioridade = pos_prioridade AND (q.data_hora, q.id) >= (pos_data_hora, pos_id)"
)
# From the position to the last row of its window (pos_edge_*), then the next window, from
# that row (excluded) to the next window's last (edge_*; none: every row after it): bounds
# of the index scan on both sides, so a walk looking for a group's worth stops at the
# window's end instead of probing every keyed row of a busy key's backlog (the function
# says why).
CLAIM_POSITION_WINDOW = (
    "q.prioridade = pos_prioridade AND (q.data_hora, q.id)"
    " BETWEEN (pos_data_hora, pos_id) AND (pos_edge_data_hora, pos_edge_id)"
)
CLAIM_NEXT_WINDOW = (
    "q.prioridade = pos_prioridade AND (q.data_hora, q.id) > (pos_edge_data_hora, pos_edge_id)"
    " AND (q.data_hora, q.id) <= (edge_data_hora, edge_id)"
)
# The id of a window's last row when there is none: a bigint's largest value.
NO_EDGE_ID = "9223372036854775807"

# After those, in the same look-up (claim_function.sql): the ready rows of the lower
# prioridades, which come after the first ready row's in claim order. A bound of the
# index scan too (its first column is in DESC order: the lower ones follow).
CLAIM_BELOW = "q.prioridade < top_prioridade"


# How the claim function returns a claim's rows (claim_query.sql), by layout. Plain: as
# the query gives them, the payload of a retry's first attempt joined. Partitioned: one
# by one, that payload read by a statement of its own, for retries only. A join put every
# day partition in the claim's plan (the first attempt may be in any day's), and every
# call locked and opened them all: claims were 2.4 times as slow at 60 days of history.
# {claim} is the claim query, {table} an identifier.
RETURN_JOINED = {
    "first_payload": "fa.payload",
    "first_payload_join": ("\nLEFT JOIN {table} AS fa ON fa.id = c.chain_id AND c.needs_payload"),
    "returned": """RETURN QUERY {claim};
                    GET DIAGNOSTICS more = ROW_COUNT;
                    claimed := claimed + more;""",
}
RETURN_ONE_BY_ONE = {
    "first_payload": "NULL::text AS first_payload",
    "first_payload_join": "",
    "returned": """FOR claimed_rec IN {claim} LOOP
                        task := claimed_rec.claimed_row;
                        liveness_locked := claimed_rec.claimed_lock;
                        first_payload := claimed_rec.first_payload;
                        IF (task).payload IS NULL AND (task).id_inicial IS NOT NULL THEN
                            SELECT fa.payload INTO first_payload
                            FROM {table} AS fa WHERE fa.id = (task).id_inicial;
                        END IF;
                        claimed := claimed + 1;
                        RETURN NEXT;
                    END LOOP;""",
}


def _claim(
    query: str,
    values: dict[str, str],
    window: str,
    returning: dict[str, str],
    limit: str = "claim_limit",
) -> str:
    """The claim function's statements that claim and return up to ``limit`` rows in
    ``window``, adding their number to ``claimed``."""
    claim = render(
        query,
        dict(
            values,
            window=window,
            limit=limit,
            first_payload=returning["first_payload"],
            first_payload_join=render(returning["first_payload_join"], values),
        ),
    )
    return render(returning["returned"], dict(values, claim=claim))


def claim_function_version() -> str:
    """The claim function's COMMENT: changes whenever its code does."""
    source = (
        sql_code(read_sql("postgres", "claim_function.sql"))
        + sql_code(read_sql("postgres", "claim_query.sql"))
        + CLAIM_IN_WINDOW
        + CLAIM_AFTER_POSITION
        + CLAIM_POSITION_WINDOW
        + CLAIM_NEXT_WINDOW
        + CLAIM_BELOW
        + NO_EDGE_ID
        + repr(RETURN_JOINED)
        + repr(RETURN_ONE_BY_ONE)
        + _lock_key_free("t")
        + deliverable("q", "h", "p")
        + claim_sets.limits_free("l", "q")
    )
    digest = hashlib.sha256(source.encode()).hexdigest()
    return f"nsj_queue_lib claim {digest[:16]}"


class PostgresDialect(Dialect):
    name = "postgres"
    layouts = LAYOUTS

    def __init__(self, partitioned: bool = False) -> None:
        self.partitioned = partitioned

    def for_layout(self, layout: str) -> Dialect:
        if layout not in LAYOUTS:
            raise ValueError(f"--layout is one of {', '.join(LAYOUTS)}, not {layout!r}")
        return PostgresDialect(partitioned=layout == "partitioned")

    def old_routine_arguments(self, release: int) -> str:
        return OLD_CLAIM_FUNCTION_ARGS[release]

    def _parts(self, names: DdlNames) -> dict[str, str]:
        values = names.template_values()
        values.update(layout_values(self.partitioned, values))
        parts = dict(values)
        parts["indexes"] = render(read_sql("postgres", "indexes.sql"), values).strip()
        parts["subscriber_indexes"] = render(
            read_sql("postgres", "subscriber_indexes.sql"), values
        ).strip()
        parts["trigger"] = render(read_sql("postgres", "trigger.sql"), values).strip()
        if not self.partitioned:
            # On the partitioned layout a task's end moves its row to its day's partition
            # (a DELETE and an INSERT, no UPDATE trigger): wait_for_task polls there.
            end = render(read_sql("postgres", "end_trigger.sql"), values).strip()
            parts["trigger"] = f"{parts['trigger']}\n\n{end}"
        parts["queue_table_ddl"] = render(read_sql("postgres", "queue_table.sql"), values)
        parts["autovacuum"] = render(
            read_sql("postgres", "autovacuum.sql"), dict(values, table=values["maintained_table"])
        ).strip()
        query_values = dict(
            values,
            lock_key_free=_lock_key_free(values["table"], HOT_DAY if self.partitioned else None),
            deliverable=deliverable("q", "handled_subscribers", "handled_processos"),
            limits_free=claim_sets.limits_free(values["limits_table"], "q"),
        )
        query = sql_code(read_sql("postgres", "claim_query.sql")).strip()
        returning = RETURN_ONE_BY_ONE if self.partitioned else RETURN_JOINED
        function_values = dict(
            values,
            claim_function_version=claim_function_version(),
            claim_in_window=_claim(query, query_values, CLAIM_IN_WINDOW, returning),
            claim_below=_claim(
                query, query_values, CLAIM_BELOW, returning, limit="claim_limit - claimed"
            ),
            claim_after_position=_claim(query, query_values, CLAIM_AFTER_POSITION, returning),
            claim_position_window=_claim(query, query_values, CLAIM_POSITION_WINDOW, returning),
            claim_next_window=_claim(query, query_values, CLAIM_NEXT_WINDOW, returning),
            no_edge_id=NO_EDGE_ID,
        )
        parts["claim_function_ddl"] = render(
            read_sql("postgres", "claim_function.sql"), function_values
        ).strip()
        parts["limited_claim_ddl"] = limited_claim_ddl(LIMITS, values)
        return parts

    def _render(self, names: DdlNames, template: str, if_not_exists: bool) -> str:
        parts = self._parts(names)
        table_values = dict(parts, if_not_exists="IF NOT EXISTS " if if_not_exists else "")
        parts["subscriber_table_ddl"] = render(
            read_sql("postgres", "subscriber_table.sql"), table_values
        ).strip()
        parts["periodic_table_ddl"] = render(
            read_sql("postgres", "periodic_table.sql"), table_values
        ).strip()
        parts["limits_table_ddl"] = render(
            read_sql("postgres", "limits_table.sql"), table_values
        ).strip()
        # The tally's tables (db/tally.py) come with the workers table: both serve nsjq status.
        parts["workers_table_ddl"] = "\n".join(
            render(read_sql("postgres", name), table_values).strip()
            for name in ("workers_table.sql", "tally_table.sql", "groups_table.sql")
        )
        parts["workflow_ddl"] = "\n\n".join(
            render(read_sql("postgres", name), table_values).strip()
            for name in ("workflow_tables.sql", "workflows_table.sql", "process_tables.sql")
        )
        parts["previous_claim_ddl"] = previous_claim_ddl(LIMITS, names)
        return render(read_sql("postgres", template), parts)

    def create_ddl(self, names: DdlNames) -> str:
        return self._render(names, "ddl.sql", if_not_exists=False)

    def upgrade_ddl(self, names: DdlNames) -> str:
        return self._render(names, "upgrade.sql", if_not_exists=True)

    def partitioned_parent_ddl(self, names: DdlNames, id_sequence: str) -> tuple[str, str]:
        """What the migration to the partitioned layout runs (db/postgres/migration.py): the
        partitioned table under the queue's name with its partitions, its ids drawn from
        ``id_sequence`` (the plain table's, a checked ``schema.name``), then the partitioned
        layout's upgrade script, which gives it its indexes, triggers and routines."""
        values = names.template_values()
        # Today's and tomorrow's days only: the swap holds the table meanwhile, and the
        # migration attaches the other days ahead after it, as the purge service does.
        values.update(layout_values(True, values, days_ahead=1))
        values["id_column"] = f"id bigint NOT NULL DEFAULT nextval('{id_sequence}'::regclass)"
        table_ddl = render(read_sql("postgres", "queue_table.sql"), values)
        return table_ddl, PostgresDialect(partitioned=True).upgrade_ddl(names)


DIALECT = PostgresDialect()
