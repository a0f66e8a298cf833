"""MariaDB's unique indexes of keys (dedupe_active, lock_key_running) hold up no enqueue.

InnoDB checks a new key against a unique index with next-key locks; past a delete-marked
entry of the same key (a finished task's, kept until the purge thread removes it) it also
locks the gap before that entry until the commit. With the indexes ascending, NULLs come
first and every new task's NULL entry, its id the greatest, goes into the gap just before
the smallest key: a transaction that enqueued a task of that dedupe key, or a claim of a
task of that lock key, held up every other enqueue of the queue until it ended. The
indexes are descending (indexes.sql), so new NULL entries go to the end, away from keys.

A held read view keeps the finished task's entry from the purge, as a long report or an
idle transaction would in production, so each case is the same at every run.

On the partitioned layout the indexes are per partition, and in the unfinished rows'
partition new entries still meet the locked gap when no unkeyed task is waiting there
(docs/flow-control.md): each test has one waiting, as a queue with a backlog has.
"""

from __future__ import annotations

import time

import pytest

from nsj_queue_lib.db.mysql.dialect import KEEPS_DESCENDING
from nsj_queue_lib.db_gen import render
from tests.helpers import mysql_queue as mysql_helpers
from tests.integration.store.backends import MYSQL, MYSQL_PARTITIONED, TASK, execute, on

pytestmark = [on(MYSQL, MYSQL_PARTITIONED), pytest.mark.fresh_queue, pytest.mark.timeout(60)]

# Long enough to tell a wait from a quick insert, short enough to fail fast.
WAIT_SECONDS = 2


def _purge_held(backend):
    """A connection whose read view keeps every entry deleted from now on."""
    reader = backend.client_conn()
    with reader.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute(f"SELECT count(*) FROM {backend.table}")
        cur.fetchall()
    return reader


def _impatient_client(backend):
    """Another caller, who gives up a lock wait after WAIT_SECONDS."""
    conn = backend.client_conn()
    with conn.cursor() as cur:
        cur.execute(f"SET SESSION innodb_lock_wait_timeout = {WAIT_SECONDS}")
    return conn, backend.client(conn)


def _enqueues_at_once(backend) -> None:
    conn, client = _impatient_client(backend)
    started = time.monotonic()
    client.insert_task(**TASK)
    client.insert_task(**dict(TASK, lock_key="another"))
    conn.commit()
    assert time.monotonic() - started < WAIT_SECONDS


def test_an_open_enqueue_of_a_dedupe_key_holds_up_no_other_enqueue(backend):
    backend.enqueue()  # the backlog
    reader = _purge_held(backend)
    finished = backend.enqueue(dedupe_key="daily-report")
    backend.set_status("sucesso", finished)  # its entry in the unique index: delete-marked
    caller = backend.client_conn()
    again = backend.client(caller).insert_task(**dict(TASK, dedupe_key="daily-report"))
    assert again is not None and again != finished

    _enqueues_at_once(backend)

    caller.commit()
    reader.rollback()
    assert backend.count("status = 'pendente'") == 4


def test_a_claim_of_a_lock_key_holds_up_no_enqueue_until_its_commit(backend):
    backlog = backend.enqueue()
    reader = _purge_held(backend)
    finished = backend.enqueue(lock_key="account-42")
    backend.set_status("processando", finished)
    backend.set_status("sucesso", finished)  # its running entry: delete-marked
    waiting = backend.enqueue(lock_key="account-42")
    # The claim's change of status, not committed yet: the lock_key_running entry it
    # adds is checked against the index (the claim's other locks are the claim's own
    # business, held for its one round trip: db/mysql/driver.py).
    claim = backend.client_conn()
    with claim.cursor() as cur:
        cur.execute(
            f"UPDATE {backend.table} SET status = 'processando' WHERE {backend.hot}id = %s",
            (waiting,),
        )

    _enqueues_at_once(backend)

    claim.commit()
    reader.rollback()
    assert backend.statuses()[waiting] == "processando"
    assert backend.statuses()[backlog] == "pendente"


def test_the_unique_indexes_of_keys_are_descending(backend):
    """What the two tests above rest on: a server that ignored DESC (MariaDB before 10.8)
    would build them ascending."""
    assert _directions(backend) == ["D", "D"]


def test_the_upgrade_makes_ascending_indexes_of_keys_descending(backend):
    """A table of an earlier release, its two indexes ascending: db_gen --upgrade rebuilds
    them, under their names, on either layout."""
    name = backend.queue.name
    layout = "partitioned" if backend.kind == "mysql-partitioned" else "plain"
    day = ", finished_day" if layout == "partitioned" else ""
    for index, column in (("dedupe", "dedupe_active"), ("lock_key_running", "lock_key_running")):
        execute(
            backend.admin,
            f"ALTER TABLE {backend.table} DROP INDEX idx_{name}_{index}, "
            f"ADD UNIQUE INDEX idx_{name}_{index} ({column}{day})",
        )
    assert _directions(backend) == ["A", "A"]
    upgrade = render(backend.queue.database, name, "mysql", upgrade=True, layout=layout)
    mysql_helpers.execute_script(backend.admin, upgrade)
    assert _directions(backend) == ["D", "D"]
    mysql_helpers.execute_script(backend.admin, upgrade)  # again: nothing to do
    assert _directions(backend) == ["D", "D"]


@pytest.mark.parametrize(
    ("version", "keeps"),
    [
        ("10.6.18-MariaDB-log", 0),
        ("10.7.8-MariaDB", 0),
        ("10.8.1-MariaDB", 1),
        ("10.11.19-MariaDB-0+deb12u1", 1),
        ("11.4.2-MariaDB", 1),
        ("5.7.44-log", 0),
        ("8.0.36", 1),
    ],
)
def test_the_upgrade_rebuilds_only_where_the_server_keeps_descending_order(
    mysql_admin, version, keeps
):
    """The upgrade's server check, evaluated by the server with VERSION() replaced: MariaDB
    10.6 builds DESC ascending, and a rebuild there would come back at every upgrade."""
    condition = KEEPS_DESCENDING.replace("%", "%%").replace("VERSION()", "%(version)s")
    rows = mysql_helpers.fetch_dicts(
        mysql_admin, f"SELECT {condition} AS keeps", {"version": version}
    )
    assert rows == [{"keeps": keeps}]


def _directions(backend) -> list[str]:
    """The first column's order (A, D) of the dedupe and lock_key_running indexes."""
    rows = mysql_helpers.fetch_dicts(
        backend.admin,
        "SELECT collation AS direction FROM information_schema.statistics "
        "WHERE table_schema = %s AND table_name = %s AND seq_in_index = 1 "
        "AND index_name IN (%s, %s) ORDER BY index_name",
        (
            backend.queue.database,
            backend.queue.name,
            f"idx_{backend.queue.name}_dedupe",
            f"idx_{backend.queue.name}_lock_key_running",
        ),
    )
    return [r["direction"] for r in rows]
