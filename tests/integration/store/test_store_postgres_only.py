"""What only the PostgreSQL store does: big batches through COPY (psycopg 3 only), and the
plans of its side tables' statements."""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib.db.postgres.store import COPY_THRESHOLD, PostgresQueueStore
from nsj_queue_lib.payload import payload_hash, serialize_payload
from tests.integration.store.backends import POSTGRES, PSYCOPG2, TASK, UTC, on

pytestmark = on(POSTGRES, PSYCOPG2)


@pytest.mark.parametrize("count", [COPY_THRESHOLD - 1, COPY_THRESHOLD])
def test_big_batches_go_through_copy_with_psycopg_3_and_store_the_same_rows(
    backend, client, conn, monkeypatch, count
):
    copied: list[int] = []
    real = PostgresQueueStore._copy_rows

    def spy(self, cur, copy_count, rows):
        copied.append(copy_count)
        return real(self, cur, copy_count, rows)

    monkeypatch.setattr(PostgresQueueStore, "_copy_rows", spy)
    when = datetime.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    tasks = [
        dict(
            TASK,
            chave_externa=str(n),
            payload={"n": n} if n % 5 else None,
            prioridade=None if n % 2 else n,
            data_hora=when if n % 3 == 0 else None,
            tenant=n % 4 or None,
            grupo_empresarial="g" if n % 6 == 0 else None,
            pub_sub=n % 7 == 0,
        )
        for n in range(count)
    ]
    before = backend.now()
    ids = client.insert_tasks(tasks)
    conn.commit()
    after = backend.now()
    assert copied == ([count] if backend.kind == "postgres" and count >= COPY_THRESHOLD else [])
    assert ids == sorted(ids) and len(set(ids)) == count
    rows = {row["id"]: row for row in backend.rows()}
    for task, task_id in zip(tasks, ids, strict=True):
        row = rows[task_id]
        text = None if task["payload"] is None else serialize_payload(task["payload"])
        assert (row["chave_externa"], row["payload"]) == (task["chave_externa"], text)
        assert row["payload_hash"] == (None if text is None else payload_hash(text))
        assert row["prioridade"] == (50 if task["prioridade"] is None else task["prioridade"])
        assert (row["tenant"], row["grupo_empresarial"]) == (
            task["tenant"],
            task["grupo_empresarial"],
        )
        assert (row["pub_sub"], row["status"], row["tentativa"], row["dead"]) == (
            task["pub_sub"],
            "pendente",
            1,
            False,
        )
        assert row["data_hora_inicial"] == row["data_hora"]
        if task["data_hora"] is None:
            assert before <= row["data_hora"] <= after
        else:
            assert row["data_hora"] == when


def _generic_plan(conn, sql: str, args: str) -> str:
    """The plan a prepared ``sql`` gets once generic (what a session reuses), as text."""
    with conn.cursor() as cur:
        cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cur.execute(f"PREPARE planned AS {sql}")
        try:
            cur.execute(f"EXPLAIN EXECUTE planned({args})")
            return "\n".join(row[0] for row in cur.fetchall())
        finally:
            cur.execute("DEALLOCATE planned")


def test_a_groups_process_rows_are_read_and_saved_by_their_keys(backend):
    """A commit group's load of its process rows, and their save (after the setting the
    settle's round trip sends first), look the rows up by key on process tables of a few
    thousand rows, where the planner's costs read both tables whole at every group."""
    from nsj_queue_lib.db.postgres.session import INDEX_ONLY_SQL
    from nsj_queue_lib.db.process_store import ProcessStore

    processes, tasks = f"{backend.table}_processes", f"{backend.table}_process_tasks"
    for table in (processes, tasks):  # never analyzed, as in a new queue's first drains
        backend.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    backend.execute(
        f"INSERT INTO {processes} (process_id, processo, state) "
        "SELECT 'p-' || n, 'noop', repeat('x', 200) FROM generate_series(1, 3000) AS n"
    )
    backend.execute(
        f"INSERT INTO {tasks} (task_id, process_id, kind) "
        "SELECT n, 'p-' || n, 'call' FROM generate_series(1, 3000) AS n"
    )
    sql = ProcessStore("postgres", backend.table).sql
    ids = "{" + ",".join(str(n) for n in range(100, 120)) + "}"
    conn = backend.client_conn()
    load = _generic_plan(conn, sql["load_for_tasks"].replace("%(task_ids)s", "$1"), f"'{ids}'")
    with conn.cursor() as cur:
        cur.execute(INDEX_ONLY_SQL)
    texts = "{" + ",".join(f"p-{n}" for n in range(100, 120)) + "}"
    save = _generic_plan(
        conn,
        sql["save_processes"],
        f"'{texts}', '{ids}', '{texts}', '{texts}', '{texts}', "
        f"'{{{','.join(['f'] * 20)}}}', '{texts}'",
    )
    conn.rollback()
    for plan in (load, save):
        assert "Seq Scan" not in plan, plan


def test_a_settle_of_a_fan_outs_children_reads_their_edges_and_rows_by_key(backend):
    """The release function reads a settled group's edges by the parents' key and the
    released rows by their primary key, whatever its caller's planner settings (the
    claim function's, sort and bitmap scans off, made the edges' count read every edge in
    child order) and on side tables of any statistics (the release of sole children walked
    the 'aguardando' index, whose entries outlive the release): every settle of a
    fan-out's children read them all."""
    from nsj_queue_lib.db.dialect import DdlNames
    from nsj_queue_lib.db.workflow_store import WorkflowStore

    schema, name = backend.table.split(".")
    names = DdlNames(schema, name).object_names()
    for table in (f"{backend.table}_parents", f"{backend.table}_waiting", backend.table):
        backend.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    root = backend.enqueue()
    conn = backend.client_conn()
    client = backend.client(conn)
    children = client.insert_tasks(
        [
            {"origem": "o", "destino": "d", "processo": "p", "chave_externa": str(n)}
            | {"payload": {}, "after": [root]}
            for n in range(300)
        ]
    )
    client.insert_task("o", "d", "p", None, "x", after=children)
    conn.commit()
    # The edges' statistics as autovacuum leaves them after such an insert (one parent
    # holds half of them); autovacuum itself is off, so that no run changes the plans.
    backend.execute(f"ANALYZE {backend.table}_parents")
    WorkflowStore(backend.dialect, backend.table).release_after_success(conn, [root])
    conn.commit()
    indexes = (names["idx_parents_child"], names["idx_aguardando"])
    # The session's counts not reported yet (the inserts' reads among them), by index.
    read_sql = (
        "SELECT sum(pg_stat_get_xact_tuples_returned(i.oid)) FROM pg_class AS i "
        "JOIN pg_namespace AS n ON n.oid = i.relnamespace "
        "WHERE n.nspname = %s AND i.relname = ANY(%s)"
    )
    with conn.cursor() as cur:
        cur.execute(read_sql, (schema, list(indexes)))
        before = cur.fetchone()[0]
        for setting in ("enable_sort", "enable_bitmapscan"):  # off in the claim function
            cur.execute(f"SET LOCAL {setting} = off")
        for group in range(0, 120, 20):
            cur.execute(
                f"SELECT {schema}.{names['release_function']}(%s::bigint[])",
                (children[group : group + 20],),
            )
        cur.execute(read_sql, (schema, list(indexes)))
        read = cur.fetchone()[0] - before
    conn.rollback()
    assert read == 0, f"{read} index entries of {indexes} read by 6 settles of 20 children"
