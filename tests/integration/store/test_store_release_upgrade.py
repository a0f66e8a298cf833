"""A rolling upgrade from the previous release (CONTRACT.md section 7, docs/upgrading.md).

The queue is created by the previous release's db_gen (its golden create file,
tests/golden/previous/), then brought up to date by this release's ``db_gen --upgrade``.
The previous release's claim routine (``claim_next_<queue>``) is still there and callable
next to this release's (``claim_next_<queue>_v<N>``); a worker of each release, the old one
driving its routine as it did (claim, then complete-and-claim in one call), drain one
queue together: every task runs once.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE, DdlNames
from nsj_queue_lib.db.limits_store import LimitsStore
from nsj_queue_lib.db.postgres.dialect import OLD_CLAIM_FUNCTION_ARGS
from nsj_queue_lib.db.postgres.store import queue_lock_key
from nsj_queue_lib.db_gen import render
from nsj_queue_lib.flow.limits import ProcessoLimits
from tests.helpers import databases
from tests.helpers import mysql_queue as mysql_helpers
from tests.integration.store.backends import MYSQL, POSTGRES, Backend, execute, fetch, value

pytestmark = pytest.mark.timeout(90)

OLD_ARGS = OLD_CLAIM_FUNCTION_ARGS[1]
PREVIOUS = Path(__file__).resolve().parents[2] / "golden" / "previous"
TASKS = 40


@pytest.fixture(params=[POSTGRES, MYSQL])
def upgraded(request):
    """A Backend on a queue made by the previous release's DDL, then upgraded by this one."""
    name = databases.unique_queue_name()
    if request.param == "postgres":
        admin = request.getfixturevalue("pg_admin")
        dsn = request.getfixturevalue("pg_dsn")
        old = (PREVIOUS / "postgres_create_v1.sql").read_text().replace("fila_teste", name)
        admin.execute(old)
        admin.execute(render("public", name, upgrade=True))
        queue: Any = databases.PgQueue(name, dsn)
        args: Any = dsn
    else:
        admin = request.getfixturevalue("mysql_admin")
        args = request.getfixturevalue("mysql_kwargs")
        database = args["database"]
        old = (PREVIOUS / "mysql_create_v1.sql").read_text()
        old = old.replace("public.", f"{database}.").replace("fila_teste", name)
        mysql_helpers.execute_script(admin, old)
        mysql_helpers.execute_script(admin, render(database, name, "mysql", upgrade=True))
        queue = mysql_helpers.MysqlQueue(name, database)
    backend = Backend(request.param, queue, admin, args)
    try:
        yield backend
    finally:
        backend.close()
        if request.param == "postgres":
            databases.drop_queue(admin, queue)
        else:
            mysql_helpers.drop_queue_tables(admin, queue.database, name)


def _routines(backend) -> set[str]:
    if backend.dialect == "postgres":
        rows = fetch(
            backend.admin,
            "SELECT proname FROM pg_proc WHERE proname LIKE %s",
            (f"claim_next_{backend.queue.name}%",),
        )
        return {r["proname"] for r in rows}
    rows = fetch(
        backend.admin,
        "SELECT routine_name AS name FROM information_schema.routines "
        "WHERE routine_schema = %s AND routine_name LIKE %s",
        (backend.queue.database, f"claim_next_{backend.queue.name}%"),
    )
    return {r["name"] for r in rows}


class OldWorker:
    """A worker of the previous release: its claim routine, called as that release did."""

    def __init__(self, backend):
        self.backend = backend
        self.routine = DdlNames("x", backend.queue.name).old_routine_names()[1].split(".")[1]
        self.schema = backend.table.split(".")[0]
        if backend.dialect == "postgres":
            self.conn = databases.connect_pg(backend.connect_args, "psycopg")
        else:
            self.conn = mysql_helpers.connect(backend.connect_args)
            execute(self.conn, "SET time_zone = '+00:00'")
        backend.opened.append(self.conn)

    def call(self, done: int | None) -> int | None:
        """Complete ``done`` (when given) and claim the next task; its id."""
        routine = f"{self.schema}.{self.routine}"
        if self.backend.dialect == "postgres":
            key = queue_lock_key(self.backend.store.queue_number)
            rows = fetch(
                self.conn,
                f"SELECT (f.task).id AS id FROM {routine}(%s, %s, %s, %s, 1) AS f",
                (done, None if done is None else "old ok", key, (done or 0) % 2**31),
            )
            self.conn.commit()
            return rows[0]["id"] if rows else None
        prefix = self.backend.store.lock_prefix(self.conn)
        document = value(
            self.conn, f"CALL {routine}(%s, %s, %s)", (done, "old ok" if done else None, prefix)
        )
        self.conn.commit()
        return None if document is None else int(json.loads(document)["id"])

    def drain(self, claimed: list[int]) -> None:
        task = self.call(None)
        while task is not None:
            claimed.append(task)
            task = self.call(task)


def new_drain(backend, claimed: list[int]) -> None:
    worker = backend.worker()
    claim = backend.store.claim(worker)
    while claim is not None:
        claimed.append(claim.task.id)
        claim = backend.store.complete_and_claim(worker, claim.task.id, "new ok", True)


def test_the_previous_release_routine_stays_and_both_fleets_run_every_task_once(upgraded):
    backend = upgraded
    name = backend.queue.name
    assert _routines(backend) == {
        f"claim_next_{name}",
        f"claim_next_{name}_v{CLAIM_ROUTINE_RELEASE}",
    }
    ids = backend.enqueue(*[dict(chave_externa=f"t{i}") for i in range(TASKS)])
    old_claims: list[int] = []
    new_claims: list[int] = []
    fleets = [
        threading.Thread(target=OldWorker(backend).drain, args=(old_claims,)),
        threading.Thread(target=new_drain, args=(backend, new_claims)),
    ]
    for fleet in fleets:
        fleet.start()
    for fleet in fleets:
        fleet.join(60)
    assert not any(fleet.is_alive() for fleet in fleets)
    everything = old_claims + new_claims
    assert sorted(everything) == sorted(ids)  # each task claimed once, none left
    assert old_claims, "the old routine claimed nothing: it is not callable"
    rows = {r["id"]: r for r in backend.rows()}
    assert {rows[i]["status"] for i in ids} == {"sucesso"}
    assert {rows[i]["mensagem"] for i in old_claims} == {"old ok"}
    assert {rows[i]["mensagem"] for i in new_claims} <= {"new ok"}

    # Once the old fleet is gone, db_gen --drop-old-routines removes its routine.
    drop = render(backend.table.split(".")[0], name, backend.dialect, drop_old_routines=True)
    if backend.dialect == "postgres":
        backend.admin.execute(drop)
    else:
        mysql_helpers.execute_script(backend.admin, drop)
    assert _routines(backend) == {f"claim_next_{name}_v{CLAIM_ROUTINE_RELEASE}"}
    assert backend.new_store().bind(backend.worker())  # this release's workers still start


def test_the_previous_release_routine_leaves_limited_processos_alone(upgraded):
    """--upgrade made the previous release's routine a call of this release's: its workers
    (which know nothing of limits) never take a task of a processo with limits, and the
    routine keeps the version comment they check at start."""
    backend = upgraded
    name = backend.queue.name
    admin = backend.client_conn()
    LimitsStore(backend.dialect, backend.table, backend.store).declare(
        admin, ProcessoLimits("limitado", max_concurrent=5), "test"
    )
    admin.commit()
    limited = backend.enqueue(processo="limitado")
    plain = backend.enqueue(processo="livre")
    old = OldWorker(backend)
    assert old.call(None) == plain
    assert old.call(plain) is None
    assert backend.statuses() == {limited: "pendente", plain: "sucesso"}

    golden = (PREVIOUS / f"{backend.dialect}_create_v1.sql").read_text()
    [created_with] = re.findall(r"'(nsj_queue_lib claim [0-9a-f]{16})'", golden)
    if backend.dialect == "postgres":
        signature = f"{backend.table.split('.')[0]}.claim_next_{name}{OLD_ARGS}"
        comment = value(
            backend.admin, "SELECT obj_description(to_regprocedure(%s), 'pg_proc')", (signature,)
        )
    else:
        comment = value(
            backend.admin,
            "SELECT routine_comment FROM information_schema.routines "
            "WHERE routine_schema = %s AND routine_name = %s",
            (backend.queue.database, f"claim_next_{name}"),
        )
    assert comment == created_with


@pytest.mark.parametrize("upgraded", [MYSQL], indirect=True)
def test_the_upgrade_rebuilds_the_indexes_that_no_longer_hold_status(upgraded):
    """The previous release's chain, equivalent and lock_key indexes held status (a rewrite
    of each at every status change); the upgraded table has this release's, as a created
    one (the lock_key index holds lock_key_status, NULL on unkeyed rows)."""
    backend = upgraded
    rows = fetch(
        backend.admin,
        "SELECT index_name AS i, GROUP_CONCAT(column_name ORDER BY seq_in_index) AS c "
        "FROM information_schema.statistics WHERE table_schema = %s AND table_name = %s "
        "AND index_name IN (%s, %s, %s) GROUP BY index_name",
        (backend.queue.database, backend.queue.name, *_redefined(backend.queue.name)),
    )
    assert {r["i"]: r["c"] for r in rows} == dict(
        zip(
            _redefined(backend.queue.name),
            [
                "id_inicial",
                "chave_externa,payload_hash",
                "lock_key,lock_key_status,prioridade,data_hora,id",
            ],
            strict=True,
        )
    )


@pytest.mark.parametrize("upgraded", [MYSQL], indirect=True)
def test_the_upgrade_makes_the_unique_indexes_of_keys_descending(upgraded):
    """The previous release's dedupe index was ascending: every new task's entry went next
    to the smallest key (indexes.sql says why that held up enqueues); the lock_key index,
    new to it, is created descending."""
    backend = upgraded
    name = backend.queue.name
    rows = fetch(
        backend.admin,
        "SELECT index_name AS i, collation AS direction FROM information_schema.statistics "
        "WHERE table_schema = %s AND table_name = %s AND seq_in_index = 1 "
        "AND index_name IN (%s, %s)",
        (backend.queue.database, name, f"idx_{name}_dedupe", f"idx_{name}_lock_key_running"),
    )
    assert {r["i"]: r["direction"] for r in rows} == {
        f"idx_{name}_dedupe": "D",
        f"idx_{name}_lock_key_running": "D",
    }


def _redefined(name: str) -> tuple[str, str, str]:
    return (f"idx_{name}_chain", f"idx_{name}_equivalent", f"idx_{name}_lock_key")
