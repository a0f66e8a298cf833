"""A queue made by the original nsj-queue-lib 1.2.2 keeps working after ``db_gen --upgrade``.

For real: nsj-queue-lib 1.2.2 is installed from PyPI into a throwaway venv
(cached between runs under the temporary directory), ITS ``db_gen`` creates
the queue, OUR ``--upgrade`` output is applied twice, and ITS ``QueueClient``
(in a subprocess of that venv) enqueues tasks that OUR code then finds.
"""

from __future__ import annotations

import json

import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db_gen import render
from nsj_queue_lib.payload import payload_hash
from tests.helpers.databases import (
    collect_until_sentinel,
    connect_pg,
    create_queue,
    drop_queue,
    queue_catalog,
)
from tests.helpers.legacy import LEGACY_KEYS, legacy_client
from tests.helpers.pg_plans import CLAIM_PATHS, claim_plan, plan_nodes

# The first run installs 1.2.2 from PyPI (~20 s); later runs reuse it.
pytestmark = [pytest.mark.slow, LEGACY_KEYS]


@pytest.fixture
def reference_catalog(pg_dsn, pg_admin, pg_autocommit):
    """The catalog of a queue created by our generator, for comparison."""
    queue = create_queue(pg_admin, pg_dsn)
    try:
        yield queue_catalog(pg_autocommit, "public", queue.name)
    finally:
        drop_queue(pg_admin, queue)


ORIGINAL_TASK = dict(
    origem="teste",
    destino="teste_destino",
    processo="processo_teste",
    chave_externa="1234567",
    payload="conteúdo da mensagem",
    tenant=1,
    grupo_empresarial="grupo",
)


def test_upgrade_of_a_real_1_2_2_queue(
    legacy_python, legacy_queue, reference_catalog, pg_admin, pg_autocommit, pg_dsn, tmp_path
):
    queue = legacy_queue
    # A task enqueued by 1.2.2 before the upgrade.
    before_task = dict(ORIGINAL_TASK, chave_externa="antes")
    [[before_id]] = legacy_client(
        legacy_python, tmp_path, pg_dsn, queue, [before_task], [before_task]
    )

    original = queue_catalog(pg_autocommit, "public", queue.name)
    assert "idx_{q}_claim" not in original["indexes"]  # the upgrade has work to do
    assert original["options"] == {}  # autovacuum by its defaults
    assert "<> 'agendada'" in original["triggers"]["trigger_insert_{q}"]

    upgrade = render("public", queue.name, upgrade=True)
    pg_admin.execute(upgrade)
    once = queue_catalog(pg_autocommit, "public", queue.name)
    pg_admin.execute(upgrade)  # idempotent: a second run succeeds and changes nothing
    assert queue_catalog(pg_autocommit, "public", queue.name) == once

    # Now the queue has everything ours has, defined the same way.
    for column, definition in reference_catalog["columns"].items():
        assert once["columns"].get(column) == definition, column
    for index, definition in reference_catalog["indexes"].items():
        assert once["indexes"].get(index) == definition, index
    assert once["triggers"] == reference_catalog["triggers"]
    assert once["options"] == reference_catalog["options"] != {}
    assert once["function"] == reference_catalog["function"]
    for index, definition in reference_catalog["subscriber_indexes"].items():
        assert once["subscriber_indexes"].get(index) == definition, index
    # Nothing the original had was lost (its extra indexes stay).
    assert set(original["indexes"]) <= set(once["indexes"])
    assert set(original["subscriber_indexes"]) <= set(once["subscriber_indexes"])
    assert set(original["columns"]) <= set(once["columns"])

    # The 1.2.2 client still enqueues into the upgraded table, and our trigger wakes workers.
    after_task = dict(ORIGINAL_TASK, prioridade=100)
    with connect_pg(pg_dsn, "psycopg", autocommit=True) as listener:
        listener.execute(f"LISTEN {queue.name}")
        [[after_id]] = legacy_client(
            legacy_python, tmp_path, pg_dsn, queue, [after_task], [ORIGINAL_TASK]
        )
        assert collect_until_sentinel(listener, pg_admin, queue.name) == [""]

    # Tasks written by 1.2.2 (before and after the upgrade) are read by our code.
    for driver in ("psycopg", "psycopg2"):
        with connect_pg(pg_dsn, driver) as conn:
            store = PostgresQueueStore(queue.table, queue.subscriber_table)
            row = store.get_task(conn, after_id)
            assert row["payload"] == "conteúdo da mensagem"
            assert row["payload_hash"] == payload_hash(
                "conteúdo da mensagem"
            )  # same hash as 1.2.2's
            assert (
                row["status"],
                row["tentativa"],
                row["prioridade"],
                row["tenant"],
                row["grupo_empresarial"],
            ) == (
                "pendente",
                1,
                100,
                1,
                "grupo",
            )
            assert (row["pub_sub"], row["dead"]) == (False, False)
            assert store.get_task(conn, before_id)["chave_externa"] == "antes"

            client = QueueClient(conn, queue.table, queue.subscriber_table)
            assert [r["id"] for r in client.list_equivalent_task(**ORIGINAL_TASK)] == [after_id]
            assert [r["id"] for r in client.list_equivalent_task(**before_task)] == [before_id]
            conn.rollback()

    # And the other way round: 1.2.2 finds what our client enqueued.
    ours = dict(ORIGINAL_TASK, chave_externa="nosso")
    with connect_pg(pg_dsn, "psycopg") as conn:
        our_id = QueueClient(conn, queue.table, queue.subscriber_table).insert_task(**ours)
        conn.commit()
    assert legacy_client(legacy_python, tmp_path, pg_dsn, queue, [], [ours]) == [[our_id]]


@pytest.mark.parametrize("path", CLAIM_PATHS)
def test_claim_on_an_upgraded_queue_uses_the_claim_index(
    path, legacy_queue, pg_admin, pg_autocommit
):
    pg_admin.execute(render("public", legacy_queue.name, upgrade=True))
    pg_admin.execute(
        f"INSERT INTO {legacy_queue.table} (processo, status) "
        "SELECT 'p', CASE WHEN g % 20 = 0 THEN 'pendente' ELSE 'sucesso' END FROM generate_series(1, 20000) g"
    )
    pg_admin.execute(f"ANALYZE {legacy_queue.table}")
    plan = claim_plan(pg_autocommit, legacy_queue.table, path)
    indexes = {node.get("Index Name") for node in plan_nodes(plan)}
    assert f"idx_{legacy_queue.name}_claim" in indexes, json.dumps(plan, indent=1)
