"""PostgreSQL splits a waiting child's count of unfinished parents in slots
(db/postgres/workflow_tables.sql): parents in different slots settle without waiting for
each other's commits, and of two that take the child's last two slots to 0 at once, the
second releases it. db_gen --upgrade moves a queue's single counts to the slotted layout.
MySQL/MariaDB keep one count per child (the same behaviour: test_store_dependencies.py)."""

from __future__ import annotations

import threading
import time

from nsj_queue_lib.db.workflow_store import WorkflowStore
from tests.integration.store import backends
from tests.integration.store.test_store_dependency_edges import child_after, succeed

pytestmark = backends.on(backends.POSTGRES, backends.PARTITIONED)


def parents_in_two_slots(backend):
    """Two committed tasks whose edges count in different slots (eight ids apart)."""
    ids = backend.enqueue(*[{"chave_externa": str(n)} for n in range(9)])
    return ids[0], ids[8]


def slots_of(backend, child):
    rows = backend.value(
        f"SELECT array_agg(slot ORDER BY slot) FROM {backend.table}_waiting WHERE child_id = %s",
        (child,),
    )
    return list(rows)


def test_a_childs_parents_in_two_slots_count_in_two_rows(backend):
    first, second = parents_in_two_slots(backend)
    child = child_after(backend, first, second)
    assert len(slots_of(backend, child)) == 2


def test_two_parents_settling_at_once_release_the_child_once_both_commit(backend):
    """The first settlement holds the child's row until its commit; the second, which took
    the other slot to 0 meanwhile, reads the counts after that commit and releases the
    child (each read the other's slot unfinished before the child's row was locked)."""
    first, second = parents_in_two_slots(backend)
    child = child_after(backend, first, second)
    wstore = WorkflowStore(backend.dialect, backend.table)
    one, other = backend.client_conn(), backend.client_conn()
    wstore.release_after_success(one, [first])
    errors: list[BaseException] = []

    def settle_the_other() -> None:
        try:
            wstore.release_after_success(other, [second])
            other.commit()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=settle_the_other)
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive(), "the second settlement did not wait for the first's commit"
    assert backend.row(child)["status"] == "aguardando"
    one.commit()
    thread.join(30)
    assert not errors, errors
    assert backend.row(child)["status"] == "pendente"


@backends.on(backends.POSTGRES)  # the partitioned layout's upgrade: test_store_migration.py
def test_the_upgrade_moves_single_counts_to_slots(backend, store, worker):
    """A queue made before the slots: its edges and counts go to slot 0, the counts'
    primary key gains the slot, and a child waiting from before is released as ever."""
    first, second = parents_in_two_slots(backend)
    child = child_after(backend, first, second)
    parents, waiting = f"{backend.table}_parents", f"{backend.table}_waiting"
    backend.execute(f"DELETE FROM {waiting} WHERE child_id = %s", (child,))
    backend.execute(f"ALTER TABLE {parents} DROP COLUMN slot")
    backend.execute(f"ALTER TABLE {waiting} DROP COLUMN slot")
    backend.execute(f"ALTER TABLE {waiting} ADD PRIMARY KEY (child_id)")
    backend.execute(
        f"INSERT INTO {waiting} (child_id, pending_parents, on_parent_failure) "
        "VALUES (%s, 2, 'cancel')",
        (child,),
    )
    backend.upgrade()
    key = backend.value(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_constraint AS c "
        "JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey) "
        "WHERE c.conrelid = %s::regclass AND c.contype = 'p'",
        (waiting,),
    )
    assert list(key) == ["child_id", "slot"]
    assert slots_of(backend, child) == [0]
    store.bind(worker)
    succeed(backend, store, worker, first, claims=12)
    assert backend.row(child)["status"] == "aguardando"
    succeed(backend, store, worker, second, claims=12)
    assert backend.row(child)["status"] == "pendente"
    backend.upgrade()  # a second run changes nothing
    assert slots_of(backend, child) == [0]
