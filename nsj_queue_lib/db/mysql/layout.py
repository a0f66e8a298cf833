"""The MySQL/MariaDB queue table's layouts: what db_gen renders differently for each.

``plain``: one table holds every attempt until the purge service deletes it.
``partitioned`` (docs/internals/storage.md, design (c2)): the queue's name is a table
partitioned by RANGE on ``finished_day``: the unfinished attempts (key 1) in partition
``p_hot``, and the finished attempts (key: the UTC day they ended, as days since
1970-01-01) in one partition per week, ``p<first day>``, which retention drops whole once
its last day is past QUEUE_PURGE_MAX_AGE. No MAXVALUE partition: a settle on a day
without its partition fails, so the purge service keeps days ahead.

Weeks, not days as on PostgreSQL: MariaDB pays for every partition of the table in each
statement, however well it is pruned: 77 partitions (60 days in days, and days ahead)
against 17 made a drain 7% slower (docs/internals/storage.md).

The same shape as PostgreSQL's (db/postgres/layout.py), in MySQL's terms: the primary key
and every unique index hold the partition key (MySQL refuses them otherwise), and the
unique indexes of unfinished keys still mean "one per key among unfinished tasks",
because every unfinished attempt has key 1 and a finished one's indexed value is NULL.
"""

from __future__ import annotations

from nsj_queue_lib.db.sql_files import read_sql, render

# As PostgreSQL's (db/postgres/layout.py): a dialect imports no other.
LAYOUTS = ("plain", "partitioned")
# The key of the hot partition: every unfinished attempt.
HOT_DAY = 1
# Day partitions db_gen creates ahead (the purge service keeps as many ahead).
DAYS_AHEAD = 14

# The partition of the unfinished attempts: every key below 2.
HOT_PARTITION = "p_hot"
# The UTC day of now, as days since 1970-01-01, whatever the session's time zone
# (UNIX_TIMESTAMP reads a time in it). NOW(6) is the statement's start, as finished_at's.
FINISHED_DAY_NOW = "UNIX_TIMESTAMP(NOW(6)) DIV 86400"

_PARTITION_KEY = """,
    -- The partition key (docs/internals/storage.md): 1 while the attempt is
    -- unfinished, then the UTC day it ended, as days since 1970-01-01.
    finished_day integer NOT NULL DEFAULT 1,
    PRIMARY KEY (id, finished_day)"""
_PARTITION_BY = f"\nPARTITION BY RANGE (finished_day) (PARTITION {HOT_PARTITION} VALUES LESS THAN ({HOT_DAY + 1}))"


# The days of one history partition: a week, Monday to Sunday (UTC).
PARTITION_DAYS = 7


def day_partition(day: int) -> str:
    """``p<day>``: the name of the history partition that begins on ``day``."""
    return f"p{int(day)}"


def partition_start(day: int) -> int:
    """The first day, a Monday, of the week partition holding ``day``."""
    return day - (day + 3) % PARTITION_DAYS  # day 0, 1970-01-01, was a Thursday


def partitions_covering(first: int, last: int) -> list[tuple[int, int]]:
    """The history partitions that cover the days ``first`` to ``last``, as (first day,
    bound: the first day after it): the first begins at ``first`` (where the table's last
    partition ends: RANGE partitions are only added at the end), each ends with a week."""
    covering = []
    while first <= last:
        bound = partition_start(first) + PARTITION_DAYS
        covering.append((first, bound))
        first = bound
    return covering


def partition_clause(first: int, bound: int) -> str:
    """ADD PARTITION's words for the history partition of the days ``first`` to
    ``bound - 1``."""
    return f"PARTITION {day_partition(first)} VALUES LESS THAN ({int(bound)})"


def hot_pin(alias: str | None = None) -> str:
    """The condition that prunes a statement of unfinished rows to ``p_hot``."""
    column = "finished_day" if alias is None else f"{alias}.finished_day"
    return f"{column} = {HOT_DAY} AND "


def layout_values(partitioned: bool, values: dict[str, str]) -> dict[str, str]:
    """The templates' layout placeholders: empty for the plain layout; for the partitioned
    one the table's shape, its partitions and trigger, the pins of the claim procedures'
    statements to the hot partition (``hot_<alias>``) and the settle's own key
    (``finished_day_set``: the trigger then changes nothing)."""
    aliases = ("t",)
    if not partitioned:
        return dict(
            id_column="id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY",
            partition_key="",
            partition_by="",
            partitions="",
            day_trigger_upgrade="",
            with_day="",
            hot="",
            finished_day_set="",
            layout_check=_layout_check(values, partitioned),
            **{f"hot_{alias}": "" for alias in aliases},
        )
    day_values = dict(values, days_ahead=str(DAYS_AHEAD), partition_days=str(PARTITION_DAYS))
    trigger = render(read_sql("mysql", "day_trigger.sql"), values).strip()
    return dict(
        id_column="id bigint NOT NULL AUTO_INCREMENT",
        partition_key=_PARTITION_KEY,
        partition_by=_PARTITION_BY,
        partitions="\n"
        + render(read_sql("mysql", "partitions.sql"), day_values).strip()
        + "\n\n"
        + trigger
        + "\n",
        # db_gen --upgrade builds the trigger again (this release's).
        day_trigger_upgrade=f"\n\nDROP TRIGGER IF EXISTS {values['day_trigger']};\n{trigger}",
        with_day=", finished_day",
        hot=hot_pin(),
        finished_day_set=f", finished_day = {FINISHED_DAY_NOW}",
        layout_check=_layout_check(values, partitioned),
        **{f"hot_{alias}": hot_pin(alias) for alias in aliases},
    )


def _layout_check(values: dict[str, str], partitioned: bool) -> str:
    """An upgrade for the other layout stops before it changes anything."""
    check = dict(
        values,
        other="plain" if partitioned else "partitioned",
        flag="" if partitioned else " --layout partitioned",
        test="= 0" if partitioned else "> 0",
    )
    return render(read_sql("mysql", "layout_check.sql"), check).strip()
