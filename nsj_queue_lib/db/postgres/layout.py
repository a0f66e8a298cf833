"""The PostgreSQL queue table's layouts: what db_gen renders differently for each.

``plain`` (today's, and nsj-queue-lib 1.2.2's): one table holds every attempt until the
purge service deletes it. ``partitioned`` (docs/internals/storage.md, design (c2)): the
queue's name is a table partitioned by ``finished_day``, the unfinished attempts in a hot
partition and each day's finished attempts in a partition of their own, which retention
drops whole. 1.2.2's clients and BI queries read and write the name as before.
"""

from __future__ import annotations

import re

from nsj_queue_lib.db.sql_files import read_sql, render

LAYOUTS = ("plain", "partitioned")
# The key of the hot partition: every unfinished attempt.
HOT_DAY = 1
# Day partitions db_gen creates ahead (the purge service keeps as many ahead).
DAYS_AHEAD = 14
# The UTC day an attempt ends, as days since 1970-01-01 (its partition's key).
FINISHED_DAY_NOW = "((clock_timestamp() AT TIME ZONE 'UTC')::date - DATE '1970-01-01')"

# For the statements that read the history (the tally's fold, status's summary), in their
# transaction. Across day partitions their plans cost past jit_above_cost, and JIT then
# compiled a plan with a node per partition and branch: 48 s for a summary that ran in
# 5 ms, on 78 partitions of 10M rows.
NO_JIT = "SET LOCAL jit = off"

# Where a migrated table's comment keeps the key of its advisory locks: the oid of the
# plain table it was (db/postgres/migration.py), which workers bound before still use.
LOCK_KEY_NOTE = "nsjq.lock_key="
_LOCK_KEY = re.compile(r"nsjq\.lock_key=(\d+)")

_PARTITION_KEY = """,
    -- The partition key (docs/internals/storage.md): 1 while the attempt is
    -- unfinished, then the UTC day it ended, as days since 1970-01-01.
    finished_day integer NOT NULL DEFAULT 1,
    PRIMARY KEY (id, finished_day)"""


def lock_key_of(comment: str | None) -> int | None:
    """The advisory lock key a migrated table's comment records (None: the table's oid)."""
    found = _LOCK_KEY.search(comment or "")
    return int(found.group(1)) if found else None


def hot_partition(table: str) -> str:
    """``[schema.]<queue>_hot``: the partition of the unfinished attempts."""
    return f"{table}_hot"


def day_partition(table: str, day: int) -> str:
    """``[schema.]<queue>_p<day>``: the attempts that ended on ``day``."""
    return f"{table}_p{day}"


def layout_values(
    partitioned: bool, values: dict[str, str], days_ahead: int = DAYS_AHEAD
) -> dict[str, str]:
    """The templates' layout placeholders: empty for the plain layout; for the partitioned
    one the table's shape, its partitions, and the hot statements' pins to the hot
    partition (``hot_<alias>``: pruned when planned, not probed in every partition)."""
    if not partitioned:
        return dict(
            id_column="id bigserial PRIMARY KEY",
            partition_key="",
            partition_by="",
            partitions="",
            with_day="",
            hot_day="",
            hot_q="",
            hot_t="",
            hot_w="",
            hot_d="",
            finished_day_d="",
            finished_day_t="",
            maintained_table=values["table"],
            layout_check=_layout_check(values, partitioned),
        )
    day_values = dict(
        values,
        hot_partition=hot_partition(values["table"]),
        days_ahead=str(days_ahead),
    )
    return dict(
        id_column="id bigserial",
        partition_key=_PARTITION_KEY,
        partition_by=" PARTITION BY RANGE (finished_day)",
        partitions="\n" + render(read_sql("postgres", "partitions.sql"), day_values).strip() + "\n",
        with_day=", finished_day",
        hot_day=str(HOT_DAY),
        **{f"hot_{alias}": f"{alias}.finished_day = {HOT_DAY} AND " for alias in "qtwd"},
        finished_day_d=f", finished_day = {FINISHED_DAY_NOW}",
        finished_day_t=f",\n        finished_day = {FINISHED_DAY_NOW}",
        maintained_table=hot_partition(values["table"]),
        layout_check=_layout_check(values, partitioned),
    )


def _layout_check(values: dict[str, str], partitioned: bool) -> str:
    """An upgrade for the other layout stops before it changes anything."""
    other = "plain" if partitioned else "partitioned"
    # A plain table becomes partitioned online, in steps a script cannot retry.
    how = (
        "move it with nsjq upgrade --apply --layout partitioned (docs/how-to/partition-a-queue.md)"
        if partitioned
        else "run db_gen --upgrade --layout partitioned"
    )
    test = "<> 'p'" if partitioned else "= 'p'"
    return (
        "DO $$\nBEGIN\n"
        f"    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('{values['table']}')) {test} THEN\n"
        f"        RAISE EXCEPTION '{values['table']} is {other}: {how}';\n"
        "    END IF;\nEND\n$$;"
    )
