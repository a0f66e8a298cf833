"""History size (issue 39): the queue on a table that holds N finished attempts.

    .venv/bin/python benchmarks/bench_history.py --rows 200000 --dialect both --rounds 3
    .venv/bin/python benchmarks/bench_history.py --dialect postgres            # 10M rows
    .venv/bin/python benchmarks/bench_history.py --dialect postgres --keep     # keep the fill
    .venv/bin/python benchmarks/bench_history.py --dialect both --layout partitioned

Databases: ``--pg-dsn`` / ``BENCH_PG_DSN`` (default ``host=127.0.0.1 user=postgres
dbname=test``) and ``--mysql-dsn`` / ``BENCH_MYSQL_DSN`` (default
``mysql://root:@127.0.0.1:3306/test``). Both queues come from db_gen.

**The fill.** Table ``bh_hist_<rows>_<days>d`` gets ``--rows`` finished attempts from
an SQL generator, not through the API. PostgreSQL runs ``INSERT ... SELECT ... FROM
generate_series`` with every index in place. MariaDB runs ``INSERT ... SELECT`` from
the SEQUENCE engine's ``seq_<lo>_to_<hi>`` with the secondary indexes dropped, then adds
them back in one ``ALTER TABLE``; with them in place, the 128 MB buffer pool made the
load crawl. Slots follow a pattern of 100 attempt rows, in ``data_hora`` order, spread
evenly over ``--days`` days (``QUEUE_PURGE_MAX_AGE``, 60) before the fill:

- 86 tasks that succeeded at the first attempt, and 1 cancelled task;
- 4 tasks that failed once (``reenfileirado``, ``proxima_tentativa``) and then
  succeeded; the retry carries ``id_inicial``, ``id_anterior``, ``*_anterior`` and no
  payload, as ``fail_and_retry`` writes it;
- 1 task that failed three times (the last attempt ``estouro_tentativas``) and its
  dead letter (``dead``, ``live_id``), which succeeded.

So 92% of rows are ``sucesso``, 7% ``falha`` and 6% are retries. Each row has about
100 bytes of JSON payload and its SHA-256 ``payload_hash``, a ``processo`` from 7 names
with skewed weights, a pseudo-random numeric ``chave_externa``, and a tenant and
``grupo_empresarial`` from small sets. Every index holds what it holds in production:
PostgreSQL's partial indexes of unfinished work none of it, MariaDB's indexes all of it.
The heap and indexes are denser than those of a table that grew through claims and
settles. PostgreSQL then runs ``VACUUM (ANALYZE)`` and a ``CHECKPOINT``, so that the
first drains do not meet the fill's checkpoints; MariaDB runs ``ANALYZE TABLE``.
``<table>_fill`` records the fill. With ``--keep`` the table stays, and a later run
reuses it when its row count, span and generator match and it is under a day old.

**The partitioned layout** (``--layout partitioned``, both queues; db_gen's, see
docs/internals/storage.md): each history row goes to the partition of the UTC day it
ended (its ``data_hora``), ``finished_day`` = days since 1970-01-01, as a settle would
have put it; none to the hot partition. The day partitions from ``--days`` + 2 days ago
to today are made before the load, as the purge service would have kept them: on
PostgreSQL one ``CREATE TABLE ... PARTITION OF`` each; on MariaDB (a partition a week),
whose RANGE partitions (no MAXVALUE) are added at the end only, one ``ALTER TABLE ...
REORGANIZE PARTITION`` that splits them off db_gen's first week
(benchmarks/_history_mysql.py).
MariaDB's load is the same, its secondary indexes (which hold ``finished_day`` where
unique) dropped and added back over every partition. Sizes are summed over the
partitions (MariaDB: ``information_schema.PARTITIONS``, each index's from
``mysql.innodb_index_stats``), and on MariaDB the rows each partition holds are printed.
The vacuum before each drain is the hot partition's (PostgreSQL), and the polls add
``finished_day >= yesterday`` so that they read the last day partitions only.

**Paired rounds.** Queue ``bh_empty_<pid>`` has no history. Before the rounds each
queue's tally (``nsjq status``'s counters) catches up, timed, as the tally service's
first runs would: done by the workers, it folded the whole history during the first
drains. Each round runs the same steps on both queues, back to back, the order
alternating:

1. ``VACUUM (ANALYZE, VERBOSE)`` on PostgreSQL, timed: the run the vacuum service
   would do. On MariaDB, a wait until InnoDB's history list is short.
2. Worker processes start: ``--processes`` x ``--concurrency``, by default the best
   drain configurations of docs/benchmarks.md (PostgreSQL 4 x 2, MariaDB 2 x 4).
   They keep every service on with its production defaults, the vacuum service
   included (60 s, 10,000 dead rows; this server's autovacuum is off). Only
   ``QUEUE_PURGE_MAX_AGE`` is 3650, so that the hourly purge finds nothing mid-drain:
   the purge is measured on its own. MariaDB's workers poll every 0.1 s.
3. The drain: ``--count`` no-op tasks go in with one ``insert_tasks`` (the enqueue
   time is reported), and the clock runs from that commit until all are ``sucesso``.
   The poll's completion curve gives the enqueue-to-finish p50 and p99 of the backlog.
   The tasks are the harness's (``chave_externa`` '0', '1', ...), whose keys fall among
   the history's numeric keys all over the ``chave_externa`` index; ``--keys tail``
   gives them keys that sort after every history key instead, as keys that grow with
   time do.
4. Paced latency: ``--latency-tasks`` tasks, one per transaction at
   ``--latency-rate``/s. For each, the time from its commit to when a poller (every
   ~3 ms) sees it ``sucesso``: the midpoint between the last poll that did not see it
   and the first that did.
5. The workers stop. On PostgreSQL, the heap and index blocks the table read into
   shared buffers meanwhile (``pg_statio_user_tables``) are reported per 1,000 tasks.
   The round's tasks are deleted: the empty queue is empty again, the history queue
   back to its N rows.

The history/empty ratios are taken within each round and their medians printed.

**Then** ``nsjq status`` on both queues, alternating, timed three ways: a new process
``python -m nsj_queue_lib status --json`` (what an operator waits for), the same
``main()`` inside this process (the status path without interpreter start-up), and the
inspection store's ``summary`` query alone.

**Last,** the purge of one day of history. ``PurgeService.run_once()`` runs as a worker
runs it: bounded ``DELETE`` rounds of ``QUEUE_PURGE_LIMIT``, each committed. Its
``QUEUE_PURGE_MAX_AGE`` is set so that the oldest day is past it. Every round is timed.
On PostgreSQL this also reports the WAL written and the ``VACUUM`` after it. On
MariaDB, the time until InnoDB's purge has caught up. On the partitioned layout the
service drops the oldest day partitions whole instead (and checks the days ahead): the
rows it reports are the partitions' estimated counts. With ``--keep`` the purged day is
filled again (its partitions made again first; on MariaDB that copies the oldest day
left).

The run prints disk free, the table and index sizes, and the machine's load. The
history queue is dropped at the end unless ``--keep``; the empty one always is. This
2-core VM drifts and is shared, so only the paired ratios of one run mean much.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import io
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _history_mysql  # noqa: E402 - the helpers next to this file
from bench_mysql import (  # noqa: E402 - the harness next to this file
    DEFAULT_MYSQL_DSN,
    DEFAULT_PG_DSN,
    POLL_SECONDS,
    ROOT,
    BenchError,
    Database,
    cpu_snapshot,
    cpu_used,
    percentile,
    running_workers,
    task_rows,
    wait_quiet,
)

FILL_VERSION = 1  # bump when the generator changes: a kept table of another version is refilled
ID0 = 1  # the id of slot 0
DAY = 86400.0
LATENCY_POLL_SECONDS = 0.003
LATENCY_WARMUP = 10
PURGE_WAIT_LIMIT = 1000  # InnoDB history list length counted as caught up
PURGE_WAIT_SECONDS = 600.0
WORKER_PURGE_MAX_AGE = "3650"  # days: the workers' hourly purge finds nothing mid-drain
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Bytes per history row, heap and indexes, as measured on 1M rows (PG 375 MB; MariaDB's
# file about 700 MB; PG's 50M partitioned rows made 19.25 GB); the fill also needs WAL
# (PG: recycled at each checkpoint, a quarter more at most with max_wal_size 1 GB) or
# sort files (MariaDB's index build: as much again).
BYTES_PER_ROW = {"postgres": 400, "mariadb": 750}
FILL_OVERHEAD = {"postgres": 1.25, "mariadb": 2.0}
DISK_MARGIN = 5 * 2**30

# -- the generator ------------------------------------------------------------------------
#
# Slot g (0-based) is attempt row id ID0 + g; within each block of 100 slots, position
# p = g % 100 says what the row is (see the docstring). head = the slot of the task's
# first attempt, attempt = its tentativa, last = no later attempt follows. Times go back
# from the anchor: slot g is (rows - g) * step seconds before it.

_SLOTS = """
    {g} AS g, {g} %% 100 AS p,
    CASE WHEN {g} %% 100 BETWEEN 88 AND 95 THEN {g} - ({g} %% 100 - 88) %% 2
         WHEN {g} %% 100 BETWEEN 96 AND 98 THEN {g} - ({g} %% 100 - 96)
         ELSE {g} END AS head,
    CASE WHEN {g} %% 100 BETWEEN 88 AND 95 THEN 1 + ({g} %% 100 - 88) %% 2
         WHEN {g} %% 100 BETWEEN 96 AND 98 THEN {g} %% 100 - 95
         ELSE 1 END AS attempt,
    CASE WHEN {g} %% 100 = 87 THEN 'cancelada'
         WHEN {g} %% 100 BETWEEN 88 AND 95 AND ({g} %% 100 - 88) %% 2 = 0 THEN 'falha'
         WHEN {g} %% 100 BETWEEN 96 AND 98 THEN 'falha'
         ELSE 'sucesso' END AS status,
    NOT (({g} %% 100 BETWEEN 88 AND 95 AND ({g} %% 100 - 88) %% 2 = 0)
         OR {g} %% 100 IN (96, 97)) AS last"""

_COLUMNS = """
    id, id_inicial, data_hora_inicial, data_hora, origem, destino, processo, chave_externa,
    proxima_tentativa, tentativa, status, reenfileirado, estouro_tentativas, mensagem,
    id_anterior, data_hora_anterior, status_anterior, mensagem_anterior, payload, tenant,
    grupo_empresarial, payload_hash, dead, live_id, prioridade"""

_ERROR = "'Erro ao processar: tempo esgotado ao chamar o servico externo'"
_PROCESSO = """CASE WHEN s.h %% 100 < 40 THEN 'emitir_nfe' WHEN s.h %% 100 < 60 THEN 'enviar_email'
         WHEN s.h %% 100 < 75 THEN 'sincronizar_estoque' WHEN s.h %% 100 < 85 THEN 'gerar_boleto'
         WHEN s.h %% 100 < 92 THEN 'webhook_pedido' WHEN s.h %% 100 < 97 THEN 'calcular_imposto'
         ELSE 'exportar_relatorio' END"""


def _values(at: Callable[[str], str], text: Callable[[str], str], sha256_hex: str) -> str:
    """The select list over ``s`` (slots with h, the task's hash, and payload); ``at(x)`` is
    the time of slot expression x, ``text(x)`` a number as text."""
    return f"""
    %(id0)s + s.g,
    CASE WHEN s.attempt > 1 THEN %(id0)s + s.head END,
    {at("s.head")},
    {at("s.g")},
    CASE s.h %% 3 WHEN 0 THEN 'erp' WHEN 1 THEN 'api' ELSE 'portal' END,
    'worker',
    {_PROCESSO},
    {text("s.h")},
    CASE WHEN s.status = 'falha' AND NOT s.last THEN {at("s.g")} + INTERVAL '30' SECOND END,
    s.attempt,
    s.status,
    s.status = 'falha' AND NOT s.last,
    s.status = 'falha' AND s.last,
    CASE s.status WHEN 'falha' THEN {_ERROR} WHEN 'cancelada' THEN 'cancelada pelo operador' END,
    CASE WHEN s.attempt > 1 THEN %(id0)s + s.g - 1 END,
    CASE WHEN s.attempt > 1 THEN {at("s.g - 1")} END,
    CASE WHEN s.attempt > 1 THEN 'falha' END,
    CASE WHEN s.attempt > 1 THEN {_ERROR} END,
    CASE WHEN s.attempt = 1 THEN s.payload END,
    1000 + s.h %% 50,
    CONCAT('GE', s.h %% 20),
    {sha256_hex},
    s.p = 99,
    CASE WHEN s.p = 99 THEN %(id0)s + s.g - 3 END,
    50"""


# The payload: about 100 bytes of JSON, the same for every attempt of a task (only the
# first one stores it; the hash goes on every attempt, as fail_and_retry copies it).
_PAYLOAD = """CONCAT('{{"cliente":', {h} %% 100000, ',"documento":"', md5({head}),
           '","itens":', 1 + {h} %% 20, ',"valor":"', ROUND(({h} %% 1000000) / 100.0, 2), '"}}')"""


def generator_sql(kind: str, partitioned: bool = False) -> str:
    """The INSERT ... SELECT of slots %(lo)s..%(hi)s into ``@TABLE@`` (MariaDB: the sequence
    table's bounds are ``@LO@`` and ``@HI@``, written into the text); ``partitioned``: each
    row with the UTC day it ended (its data_hora's, as days since 1970-01-01) as
    finished_day, the key of its day partition."""
    if kind == "postgres":

        def at(x: str) -> str:
            return f"%(anchor)s::timestamptz - make_interval(secs => (%(rows)s - ({x})) * %(step)s)"

        values = _values(
            at,
            lambda x: f"{x}::text",
            "convert_to(encode(sha256(convert_to(s.payload, 'UTF8')), 'hex'), 'UTF8')",
        )
        day = f"(({at('s.g')}) AT TIME ZONE 'UTC')::date - DATE '1970-01-01'"
        source = (
            f"SELECT u.*, k.h, {_PAYLOAD.format(h='k.h', head='u.head::text')} AS payload\n"
            f"FROM (SELECT {_SLOTS.format(g='g')}\n"
            "      FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g) AS u\n"
            "CROSS JOIN LATERAL (SELECT abs(hashint8(u.head)::bigint) AS h) AS k"
        )
    else:

        def at(x: str) -> str:
            return f"TIMESTAMPADD(MICROSECOND, -(%(rows)s - ({x})) * %(step_us)s, %(anchor)s)"

        values = _values(at, lambda x: f"CAST({x} AS CHAR)", "SHA2(s.payload, 256)")
        day = _history_mysql.finished_day(at("s.g"))
        source = (
            f"SELECT t.*, {_PAYLOAD.format(h='t.h', head='t.head')} AS payload\n"
            "FROM (SELECT u.*, CRC32(u.head) AS h\n"
            f"      FROM (SELECT {_SLOTS.format(g='v.g')}\n"
            "            FROM (SELECT CAST(seq AS SIGNED) AS g FROM seq_@LO@_to_@HI@) AS v) AS u\n"
            ") AS t"
        )
    columns = _COLUMNS
    if partitioned:
        columns += ", finished_day"
        values += f",\n    {day}"
    return f"INSERT INTO @TABLE@ ({columns})\nSELECT {values}\nFROM ({source}) AS s"


@dataclasses.dataclass
class Fill:
    rows: int
    days: int
    anchor: float  # epoch seconds: slot rows - 1 is one step before it
    load_seconds: float = 0.0  # the inserts (and MariaDB's index build)
    index_seconds: float = 0.0  # MariaDB: the index build alone
    settle_seconds: float = 0.0  # the VACUUM (ANALYZE) / ANALYZE after it
    reused: bool = False
    partitioned: bool = False  # each finished row in the partition of its day

    @property
    def last_id(self) -> int:
        return ID0 + self.rows - 1


def _params(db: Database, fill: Fill, lo: int, hi: int) -> dict[str, Any]:
    anchor = datetime.datetime.fromtimestamp(fill.anchor, tz=datetime.timezone.utc)
    params: dict[str, Any] = {"id0": ID0, "rows": fill.rows, "lo": lo, "hi": hi}
    if db.kind == "postgres":
        params.update(anchor=anchor, step=fill.days * DAY / fill.rows)
    else:
        params.update(
            anchor=anchor.strftime("%Y-%m-%d %H:%M:%S.%f"),
            step_us=int(fill.days * DAY * 1_000_000) // fill.rows,
        )
    return params


def insert_slots(db: Database, table: str, fill: Fill, first: int, last: int, chunk: int) -> None:
    """Slots ``first``..``last`` of ``fill`` into ``table``, one transaction per ``chunk``."""
    conn = db.connect()
    try:
        if db.kind == "mariadb":
            db.execute(conn, "SET time_zone = '+00:00'")
        started = time.perf_counter()
        for lo in range(first, last + 1, chunk):
            hi = min(last, lo + chunk - 1)
            sql = generator_sql(db.kind, fill.partitioned).replace("@TABLE@", table)
            sql = sql.replace("@LO@", str(lo)).replace("@HI@", str(hi))
            db.execute(conn, sql, _params(db, fill, lo, hi))
            conn.commit()
            done = hi - first + 1
            elapsed = time.perf_counter() - started
            if last - first >= chunk:
                print(
                    f"    {done:,} of {last - first + 1:,} rows, {elapsed:.0f} s "
                    f"({done / elapsed:,.0f} rows/s)",
                    flush=True,
                )
    finally:
        conn.close()


def mariadb_secondary_keys(db: Database, table: str) -> list[str]:
    """The table's secondary index definitions, as SHOW CREATE TABLE writes them."""
    conn = db.connect(autocommit=True)
    try:
        create = db.execute(conn, f"SHOW CREATE TABLE {table}")[0][1]
    finally:
        conn.close()
    return [
        line.strip().rstrip(",")
        for line in create.splitlines()
        if re.match(r"\s*(UNIQUE )?KEY `", line)
    ]


def day_partitions(db: Database, table: str, days: int) -> None:
    """The day partitions the history spans (from ``days`` + 2 days ago to today), as the
    purge service would have kept them, made where missing."""
    admin = db.connect(autocommit=True)
    try:
        if db.kind == "postgres":
            _pg_day_partitions(admin, table, days)
        else:
            # db_gen made yesterday's week onwards; the earlier weeks are split off the first.
            first = _history_mysql.today(db, admin) - days - 2
            _history_mysql.add_weeks_before(db, admin, table, first)
    finally:
        admin.close()


def _pg_day_partitions(admin: Any, table: str, days: int) -> None:
    from nsj_queue_lib.db.postgres import retention

    today = int(admin.execute(retention.TODAY).fetchone()[0])
    for day in range(today - days - 2, today + 1):
        admin.execute(
            f"CREATE TABLE IF NOT EXISTS {table}_p{day} PARTITION OF {table} "
            f"FOR VALUES FROM ({day}) TO ({day + 1})"
        )


def fill_history(
    db: Database, table: str, rows: int, days: int, chunk: int, layout: str = "plain"
) -> Fill:
    """``rows`` history rows into the empty queue ``table``; the fill recorded."""
    fill = Fill(rows, days, anchor=db_now(db), partitioned=layout == "partitioned")
    admin = db.connect(autocommit=True)
    try:
        if fill.partitioned:
            day_partitions(db, table, days)
        keys = mariadb_secondary_keys(db, table) if db.kind == "mariadb" else []
        if keys:
            names = [re.search(r"KEY `([^`]+)`", key).group(1) for key in keys]  # type: ignore[union-attr]
            db.execute(
                admin, f"ALTER TABLE {table} " + ", ".join(f"DROP INDEX `{n}`" for n in names)
            )
        started = time.perf_counter()
        insert_slots(db, table, fill, 0, rows - 1, chunk)
        if keys:
            print(f"    adding {len(keys)} secondary indexes", flush=True)
            t = time.perf_counter()
            db.execute(admin, f"ALTER TABLE {table} " + ", ".join(f"ADD {k}" for k in keys))
            fill.index_seconds = time.perf_counter() - t
        if db.kind == "postgres":
            admin.execute(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", (table, fill.last_id)
            )
        fill.load_seconds = time.perf_counter() - started
        t = time.perf_counter()
        if db.kind == "postgres":
            admin.execute(f"VACUUM (ANALYZE) {table}")
            # The fill's WAL leaves checkpoints due; the drains should not start in them.
            admin.execute("CHECKPOINT")
        else:
            db.execute(admin, f"ANALYZE TABLE {table}")
        fill.settle_seconds = time.perf_counter() - t
        db.execute(admin, f"DROP TABLE IF EXISTS {table}_fill")
        db.execute(
            admin,
            f"CREATE TABLE {table}_fill (rows_filled bigint, days integer, anchor double precision,"
            " version integer, load_seconds double precision, index_seconds double precision,"
            " settle_seconds double precision)",
        )
        db.execute(
            admin,
            f"INSERT INTO {table}_fill VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                rows,
                days,
                fill.anchor,
                FILL_VERSION,
                fill.load_seconds,
                fill.index_seconds,
                fill.settle_seconds,
            ),
        )
    finally:
        admin.close()
    return fill


def kept_fill(db: Database, table: str, rows: int, days: int) -> tuple[Fill | None, str]:
    """The fill of a kept ``table`` when it can serve this run, else None and why not."""
    conn = db.connect(autocommit=True)
    try:
        if not table_exists(db, conn, table):
            return None, "no kept table"
        if not table_exists(db, conn, f"{table}_fill"):
            return None, "the kept table has no fill record"
        found = db.execute(
            conn,
            f"SELECT rows_filled, days, anchor, version, load_seconds, index_seconds, settle_seconds FROM {table}_fill",
        )
        if not found:
            return None, "the fill record is empty"
        f_rows, f_days, anchor, version, load_s, index_s, settle_s = found[0]
        if (f_rows, f_days, version) != (rows, days, FILL_VERSION):
            return (
                None,
                f"the kept table has {f_rows:,} rows over {f_days} days, generator {version}",
            )
        age = db_now(db) - anchor
        if age > DAY:
            return None, f"the kept fill is {age / DAY:.1f} days old (its oldest day has aged)"
        hot = is_partitioned(db, conn, table)
        fill = Fill(rows, days, anchor, load_s, index_s, settle_s, reused=True, partitioned=hot)
        # A run that stopped midway leaves its tasks behind.
        db.execute(conn, f"DELETE FROM {table} WHERE id > %s", (fill.last_id,))
        count = db.execute(conn, f"SELECT count(*) FROM {table}")[0][0]
        if count != rows:
            return None, f"the kept table holds {count:,} rows, not {rows:,}"
        return fill, f"reusing the kept table ({count:,} rows, filled {age / 3600:.1f} h ago)"
    finally:
        conn.close()


def table_exists(db: Database, conn: Any, table: str) -> bool:
    if db.kind == "postgres":
        return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])
    schema, name = table.split(".")
    sql = (
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = %s"
    )
    return bool(db.execute(conn, sql, (schema, name))[0][0])


def is_partitioned(db: Database, conn: Any, table: str) -> bool:
    """Whether ``table`` has the partitioned layout (its hot partition)."""
    if db.kind == "postgres":
        return table_exists(db, conn, f"{table}_hot")
    return _history_mysql.is_partitioned(db, conn, table)


def db_now(db: Database) -> float:
    """The database's clock, epoch seconds."""
    conn = db.connect(autocommit=True)
    try:
        sql = (
            "SELECT extract(epoch FROM now())"
            if db.kind == "postgres"
            else "SELECT UNIX_TIMESTAMP(NOW(6))"
        )
        return float(db.execute(conn, sql)[0][0])
    finally:
        conn.close()


def drop_history(db: Database, table: str) -> None:
    db.drop_queue(table)
    conn = db.connect(autocommit=True)
    try:
        db.execute(conn, f"DROP TABLE IF EXISTS {table}_fill")
    finally:
        conn.close()


# -- tidying a table between measurements --------------------------------------------------


@dataclasses.dataclass
class Tidy:
    seconds: float
    note: str = ""  # PostgreSQL: whether VACUUM scanned the indexes


def tidy(db: Database, table: str) -> Tidy:
    """PostgreSQL: VACUUM (ANALYZE) the table, as the vacuum service would. MariaDB: wait
    until InnoDB's purge has caught up (its history list short)."""
    conn = db.connect(autocommit=True)
    try:
        started = time.perf_counter()
        if db.kind == "postgres":
            messages: list[str] = []
            conn.add_notice_handler(lambda diag: messages.append(diag.message_primary or ""))
            # What the vacuum service vacuums: the hot partition where there is one.
            hot = conn.execute("SELECT to_regclass(%s)", (f"{table}_hot",)).fetchone()[0]
            conn.execute(f"VACUUM (ANALYZE, VERBOSE) {table + '_hot' if hot else table}")
            return Tidy(time.perf_counter() - started, _index_vacuum_note(" ".join(messages)))
        length = 0
        while time.perf_counter() - started < PURGE_WAIT_SECONDS:
            length = int(
                db.execute(conn, "SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'")[0][1]
            )
            if length < PURGE_WAIT_LIMIT:
                break
            time.sleep(0.2)
        return Tidy(time.perf_counter() - started, f"history list {length:,}")
    finally:
        conn.close()


def _index_vacuum_note(text: str) -> str:
    """What PostgreSQL's VACUUM VERBOSE said of its index pass: bypassed, or how many scans."""
    bypassed = re.search(
        r"index scan bypassed: (\d+) pages from table \(([\d.]+)% of total\)", text
    )
    if bypassed:
        return f"index scan bypassed ({bypassed.group(1)} pages, {bypassed.group(2)}%)"
    scans = re.search(r"index scans: (\d+)", text)
    return f"index scans: {scans.group(1)}" if scans else ""


def delete_after(db: Database, table: str, last_kept_id: int) -> None:
    conn = db.connect(autocommit=True)
    try:
        db.execute(conn, f"DELETE FROM {table} WHERE id > %s", (last_kept_id,))
    finally:
        conn.close()


# -- the drain and the paced latency ------------------------------------------------------


@dataclasses.dataclass
class Drain:
    rate: float
    p50: float  # seconds from the enqueue commit until half the backlog was done
    p99: float
    enqueue: float  # seconds of the insert_tasks call and its commit
    worker_ms: float  # worker CPU per 1,000 tasks
    db_ms: float  # database server CPU per 1,000 tasks (its other clients included)


def _crossing(curve: list[tuple[float, int]], target: float) -> float:
    """When the completion curve reached ``target`` tasks, interpolated between polls."""
    for (t0, c0), (t1, c1) in zip(curve, curve[1:], strict=False):
        if c1 >= target:
            return t0 + (t1 - t0) * (target - c0) / max(1, c1 - c0)
    return curve[-1][0]


def bench_rows(count: int, keys: str) -> list[dict[str, Any]]:
    """The harness's no-op tasks. Their chave_externa ('0', '1', ...) falls among the
    history's numeric keys all over its index ("spread"); with "tail", after every one of
    them, as keys that grow with time do."""
    rows = task_rows(count)
    if keys == "tail":
        for i, row in enumerate(rows):
            row["chave_externa"] = f"z{time.time_ns()}{i:06d}"
    return rows


def recent(db: Database, table: str) -> str:
    """A condition the polls add: on the partitioned layout, rows that ended since
    yesterday, so the poll reads the last day partitions, not all 60 (a poll of the parent
    by id alone planned and probed every partition: 113 ms a poll at 10M rows on
    PostgreSQL; MariaDB's looks the id range up in each partition's primary key)."""
    conn = db.connect(autocommit=True)
    try:
        if not is_partitioned(db, conn, table):
            return ""
        if db.kind == "postgres":
            today = int(conn.execute("SELECT current_date - DATE '1970-01-01'").fetchone()[0])
        else:
            today = _history_mysql.today(db, conn)
    finally:
        conn.close()
    # A literal, so that the planner prunes the other partitions: a parameter, or
    # current_date, prunes them only at executor start-up, after (on PostgreSQL 15) the
    # prepared plan locked every partition and index, 1,000 locks a poll.
    return f" AND finished_day >= {today - 1}"


def drain_backlog(
    db: Database, table: str, count: int, keys: str, pids: list[int], timeout: float
) -> Drain:
    from nsj_queue_lib import QueueClient

    conn = db.connect()
    poll = db.connect(autocommit=True)
    try:
        started = time.perf_counter()
        ids = QueueClient(conn, table).insert_tasks(bench_rows(count, keys))
        cpu0 = cpu_snapshot(pids, db.kind)
        conn.commit()
        t0 = time.perf_counter()
        enqueue = t0 - started
        sql = (
            f"SELECT count(*) FROM {table} WHERE id BETWEEN %s AND %s AND status = 'sucesso'"
            + recent(db, table)
        )
        curve = [(0.0, 0)]
        while True:
            done = db.execute(poll, sql, (ids[0], ids[-1]))[0][0]
            curve.append((time.perf_counter() - t0, done))
            if done >= count:
                cpu1 = cpu_snapshot(pids, db.kind)
                break
            if curve[-1][0] > timeout:
                raise BenchError(f"only {done}/{count} tasks done after {timeout:.0f} s")
            time.sleep(POLL_SECONDS)
    finally:
        conn.close()
        poll.close()
    used = cpu_used(cpu0, cpu1)
    per_1k = 1000.0 / count * 1000.0 / CLK_TCK
    return Drain(
        rate=count / _crossing(curve, count),
        p50=_crossing(curve, 0.5 * count),
        p99=_crossing(curve, 0.99 * count),
        enqueue=enqueue,
        worker_ms=used["worker"] * per_1k,
        db_ms=used["db"] * per_1k,
    )


def paced_latency(db: Database, table: str, count: int, rate: float, keys: str) -> list[float]:
    """Enqueue-to-finish latencies (ms) of ``count`` tasks committed one by one at ``rate``/s."""
    from nsj_queue_lib import QueueClient

    committed: dict[int, float] = {}
    finished: dict[int, float] = {}
    lock = threading.Lock()
    enqueued = threading.Event()
    failure: list[BaseException] = []

    done_sql = f"SELECT id FROM {table} WHERE id BETWEEN %s AND %s AND status = 'sucesso'" + recent(
        db, table
    )

    def poller() -> None:
        conn = db.connect(autocommit=True)
        sql = done_sql
        previous = time.perf_counter()
        deadline = None
        try:
            while True:
                with lock:
                    waiting = {i: t for i, t in committed.items() if i not in finished}
                if not waiting:
                    if enqueued.is_set():
                        return
                    time.sleep(LATENCY_POLL_SECONDS)
                    previous = time.perf_counter()
                    continue
                if enqueued.is_set():
                    deadline = deadline or time.perf_counter() + 60
                    if time.perf_counter() > deadline:
                        raise BenchError(f"{len(waiting)} paced tasks not done 60 s after the last")
                polled = time.perf_counter()
                seen = [row[0] for row in db.execute(conn, sql, (min(waiting), max(waiting)))]
                with lock:
                    for task_id in seen:
                        if task_id in waiting:
                            finished[task_id] = (max(previous, waiting[task_id]) + polled) / 2
                previous = polled
                time.sleep(LATENCY_POLL_SECONDS)
        except BaseException as exc:
            failure.append(exc)
        finally:
            conn.close()

    thread = threading.Thread(target=poller, daemon=True)
    thread.start()
    conn = db.connect()
    try:
        client = QueueClient(conn, table)
        start = time.perf_counter() + 0.05
        for i, row in enumerate(bench_rows(count + LATENCY_WARMUP, keys)):
            pause = start + i / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            task_id = client.insert_task(**row)
            conn.commit()
            with lock:
                committed[task_id] = time.perf_counter()
    finally:
        enqueued.set()
        conn.close()
        thread.join(120)
    if failure:
        raise BenchError(f"paced latency: {failure[0]}")
    measured = sorted(committed)[LATENCY_WARMUP:]
    return [(finished[i] - committed[i]) * 1000.0 for i in measured]


# -- one side of a round ------------------------------------------------------------------


# What each round records per side: key -> (label, digits, paired ratio printed).
METRICS = {
    "rate": ("drain rate, tasks/s", 0, True),
    "p50": ("backlog p50 enqueue-to-finish, s", 2, False),
    "p99": ("backlog p99 enqueue-to-finish, s", 2, True),
    "paced_p50": ("paced p50 enqueue-to-finish, ms", 1, False),
    "paced_p99": ("paced p99 enqueue-to-finish, ms", 1, True),
    "enqueue": ("enqueue of the backlog, s", 2, True),
    "worker_ms": ("worker CPU per 1k tasks, ms", 0, False),
    "db_ms": ("database CPU per 1k tasks, ms", 0, False),
    "tidy": ("vacuum (PG) / purge wait before, s", 2, False),
    "heap_reads": ("PG heap blocks read per 1k tasks", 0, False),
    "index_reads": ("PG index blocks read per 1k tasks", 0, False),
}


@dataclasses.dataclass
class Side:
    name: str  # "empty" | "history"
    table: str
    last_kept_id: int  # rows above it are the run's own tasks, deleted after each round
    metrics: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {k: [] for k in METRICS}
    )
    notes: list[str] = dataclasses.field(default_factory=list)  # what VACUUM said, per round

    def record(
        self, tidied: Tidy, drain: Drain, paced_ms: list[float], reads: dict[str, float]
    ) -> None:
        values = {
            **dataclasses.asdict(drain),
            "paced_p50": percentile(paced_ms, 50),
            "paced_p99": percentile(paced_ms, 99),
            "tidy": tidied.seconds,
            **reads,
        }
        for key in METRICS:
            if key in values:
                self.metrics[key].append(values[key])
        self.notes.append(tidied.note)


def block_reads(db: Database, table: str) -> tuple[int, int] | None:
    """PostgreSQL: the table's heap and index blocks read into shared buffers so far."""
    if db.kind != "postgres":
        return None
    conn = db.connect(autocommit=True)
    try:
        row = conn.execute(
            "SELECT coalesce(sum(heap_blks_read), 0), coalesce(sum(idx_blks_read), 0)"
            " FROM pg_statio_user_tables WHERE relid IN"
            " (SELECT relid FROM pg_partition_tree(%s::regclass) WHERE isleaf)",
            (table,),
        ).fetchone()
        return int(row[0]), int(row[1])
    finally:
        conn.close()


# Worker processes x QUEUE_CONCURRENCY per database unless given: the best drain
# configurations of docs/benchmarks.md (MariaDB's polling every 0.1 s).
WORKERS = {"postgres": (4, 2), "mariadb": (2, 4)}


@dataclasses.dataclass
class Options:
    rows: int
    days: int
    rounds: int
    count: int
    processes: int | None
    concurrency: int | None
    latency_tasks: int
    latency_rate: float
    status_runs: int
    chunk: int
    keep: bool
    keys: str
    layout: str = "plain"
    # An installed nsjq (a wheel's, with its bytecode) timed too, next to its interpreter's
    # floor: start, import psycopg, connect, SELECT 1 (docs/benchmarks.md).
    nsjq: str | None = None

    def workers(self, db: Database) -> tuple[int, int]:
        processes, concurrency = WORKERS[db.kind]
        return self.processes or processes, self.concurrency or concurrency


def worker_extra(db: Database, concurrency: int) -> dict[str, str]:
    extra = {"QUEUE_CONCURRENCY": str(concurrency), "QUEUE_PURGE_MAX_AGE": WORKER_PURGE_MAX_AGE}
    if db.kind == "mariadb":
        extra["QUEUE_POLL_INTERVAL"] = "0.1"
    return extra


def run_side(db: Database, side: Side, opts: Options, log_dir: Path, notes: list[str]) -> None:
    tidied = tidy(db, side.table)
    note = wait_quiet(max_wait=30.0)
    if note:
        notes.append(f"{db.label} {side.name} round {len(side.notes) + 1}: {note}")
    processes, concurrency = opts.workers(db)
    extra = worker_extra(db, concurrency)
    before = block_reads(db, side.table)
    with running_workers(db, side.table, processes, extra, log_dir) as workers:
        pids = [p.pid for p in workers.procs]
        drain = drain_backlog(db, side.table, opts.count, opts.keys, pids, timeout=900.0)
        paced_ms = paced_latency(db, side.table, opts.latency_tasks, opts.latency_rate, opts.keys)
    if any(code != 0 for code in workers.exit_codes):
        raise BenchError(f"{side.name}: worker exit codes {workers.exit_codes} after SIGTERM")
    after = block_reads(db, side.table)  # the workers have exited: their statistics are in
    reads = {}
    if before is not None and after is not None:
        per_1k = 1000.0 / (opts.count + opts.latency_tasks + LATENCY_WARMUP)
        reads = {"heap_reads": (after[0] - before[0]) * per_1k}
        reads["index_reads"] = (after[1] - before[1]) * per_1k
    side.record(tidied, drain, paced_ms, reads)
    delete_after(db, side.table, side.last_kept_id)


# -- nsjq status -------------------------------------------------------------------------


FLOOR_SCRIPT = (
    "import sys, psycopg\n"
    "with psycopg.connect(sys.argv[1]) as conn:\n"
    "    conn.execute('SELECT 1').fetchall()\n"
)


def timed_run(command: list[str], env: dict[str, str], cwd: str | None = None) -> float:
    """Seconds from a process's start to its exit. Its wait blocks in waitpid: a wait
    with a timeout polls, every 50 ms at most, which rounded every run up to the next
    poll (the status times of earlier runs came in steps of 50 ms). A timer kills a
    process that hangs."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    killer = threading.Timer(600, proc.kill)
    killer.start()
    try:
        code = proc.wait()
    finally:
        killer.cancel()
    elapsed = time.perf_counter() - started
    if code != 0:
        raise BenchError(f"{command[0]} exited {code}")
    return elapsed


def status_once(db: Database, table: str, nsjq: str | None = None) -> dict[str, float]:
    """Seconds of ``nsjq status --json`` in a new process, of its main() here, and of the
    inspection store's summary query alone; with ``nsjq`` (an installed command) also that
    command's run ("installed") and its interpreter's floor ("floor"), PostgreSQL only."""
    from nsj_queue_lib.cli import main as nsjq_main
    from nsj_queue_lib.db.driver import make_driver
    from nsj_queue_lib.db.inspection import RECENT_SECONDS
    from nsj_queue_lib.settings import Settings

    args = ["status", "--dsn", db.dsn, "--table", table, "--json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DB_", "DATABASE_", "QUEUE_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    out: dict[str, float] = {}
    out["process"] = timed_run([sys.executable, "-m", "nsj_queue_lib", *args], env, str(ROOT))
    if nsjq is not None and db.kind == "postgres":
        installed_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        out["installed"] = timed_run([nsjq, *args], installed_env)
        floor = [str(Path(nsjq).with_name("python")), "-c", FLOOR_SCRIPT, db.dsn]
        out["floor"] = timed_run(floor, installed_env)
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = nsjq_main(args)
    out["main"] = time.perf_counter() - started
    if code != 0:
        raise BenchError(f"nsjq status exited {code}")
    driver = make_driver(Settings.from_env(db.worker_env(table, {})))
    conn = driver.connect(autocommit=True)
    try:
        inspection = driver.inspection_store()
        started = time.perf_counter()
        inspection.summary(conn)
        out["summary"] = time.perf_counter() - started
        # What summary read before the tally: the whole table.
        started = time.perf_counter()
        inspection._fetch(conn, "summary", {"recent_seconds": RECENT_SECONDS})
        out["scan"] = time.perf_counter() - started
    finally:
        conn.close()
    return out


def fold_tally(db: Database, table: str) -> tuple[float, int]:
    """The tally service's catch-up on ``table`` (db/tally.py), as its first runs do it:
    (seconds, finished attempts folded)."""
    from nsj_queue_lib.db.driver import make_driver
    from nsj_queue_lib.settings import Settings

    driver = make_driver(Settings.from_env(db.worker_env(table, {})))
    store = driver.store()
    conn = driver.connect(autocommit=False)
    try:
        store.bind(conn)
        conn.commit()
        folded, runs, started = 0, 0, time.perf_counter()
        while True:
            result = store.fold_counts(conn, 3650)
            conn.commit()
            if result is None:
                raise BenchError(f"{table} has no tally tables")
            folded, runs = folded + result.attempts, runs + 1
            # The first run only notes the highest id.
            if not result.more and runs > 1:
                return time.perf_counter() - started, folded
    finally:
        conn.close()


def catch_up_tallies(db: Database, sides: list[Side]) -> dict[str, float]:
    """Each side's tally caught up (seconds each), before the rounds: the workers' tally
    service would otherwise fold the whole history during the first drains (4 s of the
    database's work at 200,000 rows), once in a deployment's life, not per drain."""
    seconds_by_side = {}
    for side in sides:
        seconds, folded = fold_tally(db, side.table)
        seconds_by_side[side.name] = seconds
        print(
            f"  tally of {side.name}: {folded:,} finished attempts in {seconds:.1f} s", flush=True
        )
    return seconds_by_side


def time_status(
    db: Database,
    sides: list[Side],
    runs: int,
    tallies: dict[str, float],
    nsjq: str | None = None,
) -> dict[str, dict[str, list[float]]]:
    times: dict[str, dict[str, list[float]]] = {s.name: {} for s in sides}
    for side in sides:
        times[side.name]["tally"] = [tallies[side.name]]
    status_once(db, sides[0].table, nsjq)  # untimed: the first main() here imports what it needs
    for run in range(runs):
        for side in sides if run % 2 == 0 else sides[::-1]:
            for kind, seconds in status_once(db, side.table, nsjq).items():
                times[side.name].setdefault(kind, []).append(seconds)
        shown = ", ".join(
            f"{s.name} "
            + "/".join(
                f"{times[s.name][k][-1] * 1000:,.0f}"
                for k in ("process", "installed", "floor", "main", "summary", "scan")
                if k in times[s.name]
            )
            for s in sides
        )
        print(
            f"  status run {run + 1} (ms, process/[installed/floor/]main/summary/scan): {shown}",
            flush=True,
        )
    return times


# -- the purge of one day ----------------------------------------------------------------


@dataclasses.dataclass
class Purge:
    max_age_days: int
    deleted: int
    seconds: float
    rounds: list[float]  # seconds per round
    wal_bytes: int | None
    after: Tidy
    expected: float  # rows of what is purged: a day (MariaDB's partitioned layout: a week)


def purge_day(db: Database, table: str, fill: Fill) -> Purge:
    """PurgeService.run_once() with QUEUE_PURGE_MAX_AGE set so that the oldest day is past it
    (MariaDB's partitioned layout: the oldest week partition, by its bound)."""
    from nsj_queue_lib.runtime.purge import PurgeService
    from nsj_queue_lib.settings import Settings
    from tests.helpers.services import make_service

    max_age = fill.days - 1 - math.floor((db_now(db) - fill.anchor) / DAY)
    expected = fill.rows / fill.days
    if db.kind != "postgres":
        conn = db.connect(autocommit=True)
        try:
            if _history_mysql.is_partitioned(db, conn, table):
                first, bound, _ = _history_mysql.history_partitions(db, conn, table)[0]
                today = _history_mysql.today(db, conn)
                max_age = today - bound
                # The fill's days in it: from the oldest day it made to the bound.
                oldest = today - fill.days - 1
                expected *= max(bound - max(first, oldest), 0)
        finally:
            conn.close()
    settings = Settings.from_env(db.worker_env(table, {"QUEUE_PURGE_MAX_AGE": str(max_age)}))
    service = make_service(PurgeService, settings)
    rounds: list[float] = []
    purge_round = service.store.purge_round

    def timed(conn: Any, max_age_days: int, limit: int, sides: Any = None) -> int:
        started = time.perf_counter()
        try:
            return int(purge_round(conn, max_age_days, limit, sides=sides))
        finally:
            rounds.append(time.perf_counter() - started)

    service.store.purge_round = timed  # type: ignore[method-assign]
    wal0 = _wal_lsn(db)
    started = time.perf_counter()
    deleted = service.run_once()
    seconds = time.perf_counter() - started
    wal1 = _wal_lsn(db)
    if deleted is None:
        raise BenchError("the purge service did not get its lock")
    wal = None if wal0 is None or wal1 is None else wal1 - wal0
    return Purge(max_age, deleted, seconds, rounds, wal, tidy(db, table), expected)


def _wal_lsn(db: Database) -> int | None:
    if db.kind != "postgres":
        return None
    conn = db.connect(autocommit=True)
    try:
        return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])
    finally:
        conn.close()


def refill_purged(db: Database, table: str, fill: Fill, chunk: int) -> None:
    """Put the purged slots back (they were the oldest: slots below the first id left)."""
    conn = db.connect(autocommit=True)
    try:
        first_left = db.execute(conn, f"SELECT min(id) FROM {table}")[0][0]
    finally:
        conn.close()
    gone = (first_left or fill.last_id + 1) - ID0
    if gone > 0:
        started = time.perf_counter()
        if fill.partitioned:  # the purge dropped the day partitions they were in
            day_partitions(db, table, fill.days)
        insert_slots(db, table, fill, 0, gone - 1, chunk)
        if fill.partitioned and db.kind == "mariadb":
            # The REORGANIZE left the partitions it rebuilt without statistics (0 rows);
            # the next run's sizes and partition rows read them.
            with contextlib.closing(db.connect(autocommit=True)) as admin:
                db.execute(admin, f"ANALYZE TABLE {table}")
        tidy(db, table)
        print(f"  refilled the purged {gone:,} rows in {time.perf_counter() - started:.1f} s")


# -- sizes and the machine ------------------------------------------------------------------


def sizes(db: Database, table: str) -> dict[str, int]:
    """Bytes: the table (heap or clustered index), its indexes, the total, and each index."""
    conn = db.connect(autocommit=True)
    try:
        if db.kind == "postgres":
            # Summed over the partitions (a partitioned table has no storage of its own;
            # a plain one is its own only leaf).
            heap, indexes, total = conn.execute(
                "SELECT sum(pg_relation_size(relid)), sum(pg_indexes_size(relid)),"
                " sum(pg_total_relation_size(relid))"
                " FROM pg_partition_tree(%s::regclass) WHERE isleaf",
                (table,),
            ).fetchone()
            each = conn.execute(
                "SELECT i.indexrelid::regclass::text, (SELECT sum(pg_relation_size(t.relid))"
                " FROM pg_partition_tree(i.indexrelid) AS t WHERE t.isleaf) FROM pg_index AS i"
                " WHERE i.indrelid = %s::regclass ORDER BY 2 DESC",
                (table,),
            ).fetchall()
            heap, indexes, total = int(heap or 0), int(indexes or 0), int(total or 0)
            each = [(name, int(size or 0)) for name, size in each]
            return {"table": heap, "indexes": indexes, "total": total, **dict(each)}
        if _history_mysql.is_partitioned(db, conn, table):
            return _history_mysql.sizes(db, conn, table)
        schema, name = table.split(".")
        each = db.execute(
            conn,
            "SELECT index_name, stat_value * @@innodb_page_size FROM mysql.innodb_index_stats"
            " WHERE database_name = %s AND table_name = %s AND stat_name = 'size'"
            " ORDER BY 2 DESC",
            (schema, name),
        )
        file_size = db.execute(
            conn,
            "SELECT file_size FROM information_schema.INNODB_SYS_TABLESPACES WHERE name = %s",
            (f"{schema}/{name}",),
        )
        clustered = sum(int(b) for n, b in each if n == "PRIMARY")
        secondary = sum(int(b) for n, b in each if n != "PRIMARY")
        total = int(file_size[0][0]) if file_size else clustered + secondary
        return {
            "table": clustered,
            "indexes": secondary,
            "total": total,
            **{n: int(b) for n, b in each},
        }
    finally:
        conn.close()


def data_directory(db: Database) -> str:
    conn = db.connect(autocommit=True)
    try:
        sql = "SHOW data_directory" if db.kind == "postgres" else "SELECT @@datadir"
        return str(db.execute(conn, sql)[0][0])
    finally:
        conn.close()


def disk_free(path: str) -> tuple[str, int]:
    """(the path measured, bytes free): ``path``, or / where it cannot be read."""
    try:
        return path, shutil.disk_usage(path).free
    except OSError:
        return "/", shutil.disk_usage("/").free


def gb(n: float) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def machine_state() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    meminfo = Path("/proc/meminfo").read_text()
    available = int(re.search(r"MemAvailable:\s+(\d+)", meminfo).group(1)) * 1024  # type: ignore[union-attr]
    return f"{os.cpu_count()} CPUs, load average {load}, {gb(available)} memory available"


def print_sizes(db: Database, table: str) -> dict[str, int]:
    got = sizes(db, table)
    where, free = disk_free(data_directory(db))
    each = ", ".join(
        f"{name.split('.')[-1]} {gb(b)}"
        for name, b in got.items()
        if name not in ("table", "indexes", "total")
    )
    print(
        f"  {table}: table {gb(got['table'])}, indexes {gb(got['indexes'])}, total {gb(got['total'])}"
        f"\n    indexes: {each}\n  disk free at {where}: {gb(free)}",
        flush=True,
    )
    if db.kind == "mariadb":
        _print_mariadb_partitions(db, table)
    return got


def _print_mariadb_partitions(db: Database, table: str) -> None:
    """Where a partitioned MariaDB table's rows are: the check that the fill put the history
    in its day partitions, not in the hot one."""
    conn = db.connect(autocommit=True)
    try:
        if _history_mysql.is_partitioned(db, conn, table):
            print(f"    partitions: {_history_mysql.partition_rows(db, conn, table)}", flush=True)
    finally:
        conn.close()


# -- one dialect ----------------------------------------------------------------------------


def prepare_history(db: Database, opts: Options) -> tuple[str, Fill]:
    name = f"bh_hist_{opts.rows}_{opts.days}d" + ("_part" if opts.layout == "partitioned" else "")
    table = f"{db.schema}.{name}"
    fill, why = kept_fill(db, table, opts.rows, opts.days)
    print(f"  {why}", flush=True)
    if fill is not None:
        return table, fill
    drop_history(db, table)
    where, free = disk_free(data_directory(db))
    need = int(opts.rows * BYTES_PER_ROW[db.kind] * FILL_OVERHEAD[db.kind]) + DISK_MARGIN
    if free < need:
        raise BenchError(f"{gb(free)} free at {where}; the fill may need {gb(need)}")
    print(f"  filling {opts.rows:,} rows ({gb(free)} free at {where})", flush=True)
    db.create_queue(name, opts.layout)
    try:
        fill = fill_history(db, table, opts.rows, opts.days, opts.chunk, opts.layout)
    except BaseException:
        drop_history(db, table)
        raise
    print(
        f"  filled in {fill.load_seconds:.0f} s ({opts.rows / fill.load_seconds:,.0f} rows/s"
        + (f"; index build {fill.index_seconds:.0f} s" if fill.index_seconds else "")
        + f"), then {'VACUUM (ANALYZE), CHECKPOINT' if db.kind == 'postgres' else 'ANALYZE TABLE'}"
        f" {fill.settle_seconds:.1f} s",
        flush=True,
    )
    return table, fill


def run_dialect(db: Database, opts: Options, log_dir: Path) -> dict[str, Any]:
    print(f"\n== {db.label}: {db.describe()}", flush=True)
    if db.kind == "postgres":
        conn = db.connect(autocommit=True)
        try:
            print(f"  autovacuum = {conn.execute('SHOW autovacuum').fetchone()[0]}", flush=True)
        finally:
            conn.close()
    print(f"  {machine_state()}", flush=True)
    table, fill = prepare_history(db, opts)
    result: dict[str, Any] = {"fill": fill, "notes": []}
    empty_table = db.create_queue(f"bh_empty_{os.getpid()}", opts.layout)
    try:
        result["sizes"] = print_sizes(db, table)
        sides = [Side("empty", empty_table, 0), Side("history", table, fill.last_id)]
        tallies = catch_up_tallies(db, sides)
        for number in range(1, opts.rounds + 1):
            for side in sides if number % 2 else sides[::-1]:
                run_side(db, side, opts, log_dir, result["notes"])
            _print_round(number, sides)
        result["sides"] = sides
        for side in sides:
            tidy(db, side.table)
        # A failure past the rounds costs that phase only: the rounds are reported.
        if opts.status_runs:
            result["status"] = _phase(
                result,
                "nsjq status",
                time_status,
                db,
                sides,
                opts.status_runs,
                tallies,
                opts.nsjq,
            )
        print("  purging one day", flush=True)
        result["purge"] = _phase(result, "purge", purge_day, db, table, fill)
        if result["purge"] is not None:
            _print_purge(result["purge"])
            if opts.keep:
                refill_purged(db, table, fill, opts.chunk)
        result["machine"] = machine_state()
    finally:
        db.drop_queue(empty_table)
        if not opts.keep:
            drop_history(db, table)
            print(f"  dropped {table}", flush=True)
        else:
            print(f"  kept {table}", flush=True)
    return result


def _phase(result: dict[str, Any], name: str, run: Callable[..., Any], *args: Any) -> Any:
    """``run(*args)``, or None and a note when it failed."""
    try:
        return run(*args)
    except Exception as exc:
        note = f"{name} FAILED: {exc!r}"
        print(f"  {note}", flush=True)
        result["notes"].append(note)
        return None


def _print_round(number: int, sides: list[Side]) -> None:
    e, h = (side.metrics for side in sides)
    print(
        f"  round {number}: drain empty {e['rate'][-1]:,.0f}/s history {h['rate'][-1]:,.0f}/s"
        f" ratio {h['rate'][-1] / e['rate'][-1]:.3f}; backlog p99 {e['p99'][-1]:.2f}/"
        f"{h['p99'][-1]:.2f} s; paced p99 {e['paced_p99'][-1]:.1f}/{h['paced_p99'][-1]:.1f} ms;"
        f" enqueue {e['enqueue'][-1]:.2f}/{h['enqueue'][-1]:.2f} s; vacuum/purge wait"
        f" {e['tidy'][-1]:.2f}/{h['tidy'][-1]:.2f} s {sides[1].notes[-1]}",
        flush=True,
    )


def _print_purge(p: Purge) -> None:
    ordered = p.rounds
    third = max(1, len(ordered) // 3)
    thirds = "/".join(
        f"{sum(ordered[i * third : (i + 1) * third if i < 2 else None]):.1f}" for i in range(3)
    )
    wal = f", WAL {gb(p.wal_bytes)}" if p.wal_bytes is not None else ""
    print(
        f"  purge (QUEUE_PURGE_MAX_AGE={p.max_age_days}): {p.deleted:,} rows"
        f" (expected {p.expected:,.0f}) in {len(p.rounds)} rounds, {p.seconds:.2f} s"
        f" (rounds by thirds {thirds} s; round median {statistics.median(ordered) * 1000:.1f} ms,"
        f" p99 {percentile(ordered, 99) * 1000:.1f} ms, slowest {max(ordered) * 1000:,.0f} ms,"
        f" round {ordered.index(max(ordered)) + 1}){wal}; then"
        f" {'VACUUM' if p.wal_bytes is not None else 'InnoDB purge wait'} {p.after.seconds:.1f} s"
        f" {p.after.note}",
        flush=True,
    )


# -- the report ------------------------------------------------------------------------------


def _spread(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    v = [x * scale for x in values]
    return f"{statistics.median(v):,.{digits}f} ({min(v):,.{digits}f}-{max(v):,.{digits}f})"


def report(db: Database, opts: Options, r: dict[str, Any]) -> None:
    fill: Fill = r["fill"]
    empty, history = r["sides"]
    size = r["sizes"]
    print(f"\n{db.label}, {fill.rows:,} history rows over {fill.days} days", end="")
    print(f" ({fill.rows / fill.days:,.0f} a day)" + (", a kept table" if fill.reused else ""))
    index = f" (of which the index build {fill.index_seconds:.0f} s)" if fill.index_seconds else ""
    settle = "VACUUM (ANALYZE), CHECKPOINT" if db.kind == "postgres" else "ANALYZE TABLE"
    print(f"  fill: {fill.load_seconds:.0f} s{index}, then {settle} {fill.settle_seconds:.0f} s")
    print(
        f"  size: table {gb(size['table'])}, indexes {gb(size['indexes'])}, total {gb(size['total'])}"
    )
    processes, concurrency = opts.workers(db)
    print(
        f"  {opts.rounds} paired rounds of {opts.count:,} tasks, {processes} x {concurrency}"
        f" workers; paced {opts.latency_tasks} at {opts.latency_rate:g}/s; keys {opts.keys}."
        " Medians (min-max):"
    )
    for key, (label, digits, paired) in METRICS.items():
        e, h = empty.metrics[key], history.metrics[key]
        if not e or not h:
            continue
        line = (
            f"    {label:36} empty {_spread(e, 1, digits):>24}  history {_spread(h, 1, digits):>24}"
        )
        if paired:
            ratios = [b / a for a, b in zip(e, h, strict=True)]
            line += f"  history/empty per round {_spread(ratios, 1, 3)}"
        print(line)
    said = sorted({note for note in history.notes if note})
    if said:
        print(f"    history side, before each drain: {'; '.join(said)}")
    status = r.get("status") or {"empty": {}, "history": {}}
    for kind, label in (
        ("process", "nsjq status, new process, ms"),
        ("installed", "nsjq status, installed (--nsjq), ms"),
        ("floor", "its floor: psycopg, connect, SELECT 1, ms"),
        ("main", "nsjq status main(), ms"),
        ("summary", "summary query, ms"),
        ("scan", "summary read of the whole table, ms"),
        ("tally", "tally catch-up, ms"),
    ):
        e, h = status["empty"].get(kind), status["history"].get(kind)
        if e and h:
            print(f"    {label:36} empty {_spread(e, 1000):>24}  history {_spread(h, 1000):>24}")
    if r.get("purge") is not None:
        _print_purge(r["purge"])
    print(f"  machine at the end: {r.get('machine', '')}")
    for note in r["notes"]:
        print(f"  - {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000, help="history rows (10,000,000)")
    parser.add_argument(
        "--days", type=int, default=60, help="days they span: QUEUE_PURGE_MAX_AGE (60)"
    )
    parser.add_argument("--dialect", choices=("postgres", "mysql", "both"), default="postgres")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=20_000, help="tasks per drain (20,000)")
    parser.add_argument("--processes", type=int, help="worker processes (PG 4, MariaDB 2)")
    parser.add_argument("--concurrency", type=int, help="QUEUE_CONCURRENCY (PG 2, MariaDB 4)")
    parser.add_argument("--latency-tasks", type=int, default=500)
    parser.add_argument("--latency-rate", type=float, default=100.0)
    parser.add_argument("--status-runs", type=int, default=3, help="0: no nsjq status timing")
    parser.add_argument("--chunk", type=int, default=500_000, help="fill rows per transaction")
    parser.add_argument(
        "--keep", action="store_true", help="keep the filled table for the next run"
    )
    parser.add_argument(
        "--keys",
        choices=("spread", "tail"),
        default="spread",
        help="where the benchmark tasks' chave_externa sort among the history's (spread)",
    )
    parser.add_argument(
        "--layout",
        choices=("plain", "partitioned"),
        default="plain",
        help="the queue tables' layout (db_gen --layout; partitioned: by day, both dialects)",
    )
    parser.add_argument(
        "--nsjq",
        help="an installed nsjq (a wheel's) to time beside the source tree's, with its "
        "interpreter's floor (PostgreSQL)",
    )
    parser.add_argument("--pg-dsn", default=os.environ.get("BENCH_PG_DSN") or DEFAULT_PG_DSN)
    parser.add_argument(
        "--mysql-dsn", default=os.environ.get("BENCH_MYSQL_DSN") or DEFAULT_MYSQL_DSN
    )
    args = parser.parse_args(argv)
    if args.rows < 100 or args.rows % 100:
        parser.error("--rows must be a multiple of 100 (the generator's pattern)")
    opts = Options(
        args.rows,
        args.days,
        args.rounds,
        args.count,
        args.processes,
        args.concurrency,
        args.latency_tasks,
        args.latency_rate,
        args.status_runs,
        args.chunk,
        args.keep,
        args.keys,
        args.layout,
        args.nsjq,
    )
    dbs = []
    if args.dialect in ("postgres", "both"):
        dbs.append(Database("postgres", args.pg_dsn))
    if args.dialect in ("mysql", "both"):
        dbs.append(Database("mariadb", args.mysql_dsn))
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    print(
        f"bench_history: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC,"
        f" commit {commit}, Python {sys.version.split()[0]}"
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="nsj_bench_history_") as logs:
        for db in dbs:
            results.append((db, run_dialect(db, opts, Path(logs))))
    for db, r in results:
        report(db, opts, r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
