"""MariaDB's partitioned layout in bench_history.py (db/mysql/layout.py): finding it, making
the week partitions the history spans, and reading its size and rows per partition.

The table is partitioned by RANGE on ``finished_day``: ``p_hot`` (key 1) holds the
unfinished attempts, ``p<monday>`` the attempts that ended in that UTC week (days since
1970-01-01). db_gen makes the weeks of yesterday to ``DAYS_AHEAD`` days ahead and the
purge service keeps adding weeks at the end; nothing makes weeks before the first one,
which a history of 60 days needs.

``db`` is bench_mysql's ``Database`` (a MariaDB one), ``conn`` an autocommit connection
of it, ``table`` ``schema.name``.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.mysql.layout import (
    FINISHED_DAY_NOW,
    HOT_PARTITION,
    partition_clause,
    partition_start,
    partitions_covering,
)

_PARTITIONS = "FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"


def finished_day(at: str) -> str:
    """The partition key of a row that ended at ``at`` (a DATETIME expression): its UTC day
    as days since 1970-01-01, as the layout's trigger computes it from finished_at. The
    fill's session is UTC (as the workers'), so UNIX_TIMESTAMP reads ``at`` as UTC."""
    return f"UNIX_TIMESTAMP({at}) DIV 86400"


def is_partitioned(db: Any, conn: Any, table: str) -> bool:
    """Whether ``table`` has the partitioned layout: its hot partition."""
    found = db.execute(
        conn,
        f"SELECT count(*) {_PARTITIONS} AND PARTITION_NAME = %s",
        (*_names(table), HOT_PARTITION),
    )
    return bool(found[0][0])


def today(db: Any, conn: Any) -> int:
    """The UTC day of now, as days since 1970-01-01 (the key of the partition it fills)."""
    return int(db.execute(conn, f"SELECT {FINISHED_DAY_NOW}")[0][0])


def history_partitions(db: Any, conn: Any, table: str) -> list[tuple[int, int, str]]:
    """The history partitions of ``table`` in order: (first day, bound, partition name)."""
    rows = db.execute(
        conn,
        f"SELECT PARTITION_NAME, PARTITION_DESCRIPTION {_PARTITIONS} AND PARTITION_NAME <> %s"
        " ORDER BY PARTITION_ORDINAL_POSITION",
        (*_names(table), HOT_PARTITION),
    )
    return [(int(str(name)[1:]), int(bound), str(name)) for name, bound in rows]


def add_weeks_before(db: Any, conn: Any, table: str, first_day: int) -> int:
    """The week partitions from ``first_day``'s up to the table's first partition, made
    where missing; how many. A RANGE partition without MAXVALUE is added at the end only,
    so the earlier weeks are split off the first partition (REORGANIZE, as the library's
    tests make an old week): instant while it is empty, a copy of its rows when a purge
    left it the oldest."""
    found = history_partitions(db, conn, table)
    if not found:
        raise RuntimeError(f"{table} has no history partition")
    lowest, bound, name = found[0]
    missing = [
        (first, min(end, lowest))
        for first, end in partitions_covering(partition_start(first_day), lowest - 1)
    ]
    if not missing:
        return 0
    into = ", ".join(partition_clause(first, end) for first, end in missing)
    db.execute(
        conn,
        f"ALTER TABLE {table} REORGANIZE PARTITION {name} INTO ({into}, "
        f"PARTITION {name} VALUES LESS THAN ({bound}))",
    )
    return len(missing)


def sizes(db: Any, conn: Any, table: str) -> dict[str, int]:
    """Bytes, as bench_history's sizes(): the clustered indexes (table), the secondary ones,
    the total, and each index, summed over the partitions. InnoDB keeps each partition's
    statistics under ``<name>#P#<partition>``; ANALYZE TABLE (after the fill) updates them."""
    schema, name = _names(table)
    [(data, index)] = db.execute(
        conn, f"SELECT SUM(DATA_LENGTH), SUM(INDEX_LENGTH) {_PARTITIONS}", (schema, name)
    )
    each = db.execute(
        conn,
        "SELECT index_name, SUM(stat_value) * @@innodb_page_size FROM mysql.innodb_index_stats"
        " WHERE database_name = %s AND SUBSTRING_INDEX(table_name, '#P#', 1) = %s"
        " AND table_name LIKE '%%#P#%%' AND stat_name = 'size'"
        " GROUP BY index_name ORDER BY 2 DESC",
        (schema, name),
    )
    data, index = int(data or 0), int(index or 0)
    return {
        "table": data,
        "indexes": index,
        "total": data + index,
        **{n: int(b) for n, b in each},
    }


def partition_rows(db: Any, conn: Any, table: str) -> str:
    """Where the rows are, as InnoDB estimates them: the hot partition's, and the day
    partitions that hold any (how many, which days, their rows)."""
    rows = db.execute(
        conn,
        f"SELECT PARTITION_NAME, TABLE_ROWS {_PARTITIONS} ORDER BY PARTITION_ORDINAL_POSITION",
        _names(table),
    )
    hot = sum(int(n or 0) for p, n in rows if p == HOT_PARTITION)
    held = [(str(p), int(n)) for p, n in rows if p != HOT_PARTITION and n]
    text = f"{HOT_PARTITION} ~{hot:,} rows; {len(held)} of {len(rows) - 1} history partitions hold rows"
    if held:
        text += f" ({held[0][0]}..{held[-1][0]}, ~{sum(n for _, n in held):,})"
    return text


def _names(table: str) -> tuple[str, str]:
    schema, name = table.split(".")
    return schema, name
