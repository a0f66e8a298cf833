"""Every dialect's store has every operation of its protocols, with the same parameters.

All three stores are ``QueueStore``s (client, worker and maintenance operations);
the stores of databases with session locks (PostgreSQL, MySQL) are also
``LockingQueueStore``s, and SingleStore's store, whose locks live in the socket
server, has none of the session-lock operations.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import pytest

from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db.queue_store import (
    ClientStore,
    LockingQueueStore,
    MaintenanceStore,
    QueueStore,
    SessionLockStore,
    WorkerStore,
)
from nsj_queue_lib.db.singlestore.store import SingleStoreQueueStore

ALL_STORES = [PostgresQueueStore, MysqlQueueStore, SingleStoreQueueStore]
LOCKING_STORES = [PostgresQueueStore, MysqlQueueStore]


def operations(protocol: type) -> dict[str, Any]:
    """The protocol's operations, its bases' included: {name: function or property}."""
    found: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        for name, member in vars(cls).items():
            if name.startswith("_"):
                continue
            if callable(member) or isinstance(member, property):
                found[name] = member
    return found


QUEUE_OPERATIONS = sorted(operations(QueueStore))
LOCK_OPERATIONS = sorted(set(operations(LockingQueueStore)) - set(QUEUE_OPERATIONS))


def test_the_protocols_list_the_operations():
    assert {"insert_task", "insert_tasks", "get_task"} <= set(operations(ClientStore))
    assert {"bind", "queue_number", "claim_uncommitted", "release"} <= set(operations(WorkerStore))
    assert {"find_orphans", "purge_round", "promote_due"} <= set(operations(MaintenanceStore))
    assert set(QUEUE_OPERATIONS) == (
        set(operations(ClientStore))
        | set(operations(WorkerStore))
        | set(operations(MaintenanceStore))
    )
    assert set(LOCK_OPERATIONS) == {
        "claim",
        "complete_and_claim",
        "unlock_task",
        "try_service_lock",
        "service_unlock",
    }
    assert set(operations(SessionLockStore)) >= set(LOCK_OPERATIONS)


def _check_signature(store_class: type, name: str, protocol_member: Any) -> None:
    member = getattr(store_class, name)
    if isinstance(protocol_member, property):
        assert isinstance(member, property), f"{store_class.__name__}.{name} is not a property"
        return
    expected = inspect.signature(protocol_member)
    actual = inspect.signature(member)
    wanted = list(expected.parameters.values())
    got = {p.name: p for p in actual.parameters.values()}
    for param in wanted:
        assert param.name in got, f"{store_class.__name__}.{name} lacks parameter {param.name}"
    # Positional order matches, so the runtime may pass arguments by position.
    assert list(got)[: len(wanted)] == [p.name for p in wanted]
    # Anything extra must be optional.
    for extra in list(got)[len(wanted) :]:
        assert got[extra].default is not inspect.Parameter.empty, (
            f"{store_class.__name__}.{name}: {extra}"
        )


@pytest.mark.parametrize("store_class", ALL_STORES)
@pytest.mark.parametrize("name", QUEUE_OPERATIONS)
def test_each_store_takes_the_protocols_parameters(store_class, name):
    _check_signature(store_class, name, operations(QueueStore)[name])


@pytest.mark.parametrize("store_class", LOCKING_STORES)
@pytest.mark.parametrize("name", LOCK_OPERATIONS)
def test_each_locking_store_takes_the_protocols_parameters(store_class, name):
    _check_signature(store_class, name, operations(LockingQueueStore)[name])


@pytest.mark.parametrize("name", LOCK_OPERATIONS)
def test_the_singlestore_store_has_no_session_lock_operations(name):
    assert not hasattr(SingleStoreQueueStore, name)


@pytest.mark.parametrize("store_class", ALL_STORES)
def test_each_store_is_a_queue_store(store_class):
    store: QueueStore = store_class("s.q", "s.q_subscriber")
    assert store.queue_table == "s.q" and store.subscriber_table == "s.q_subscriber"
    with pytest.raises(RuntimeError, match="bind"):
        _ = store.queue_number  # nothing is known of the queue before bind()


@pytest.mark.parametrize("store_class", LOCKING_STORES)
def test_each_locking_store_is_a_locking_queue_store(store_class):
    store: LockingQueueStore = store_class("s.q", "s.q_subscriber")
    assert store.queue_table == "s.q"
