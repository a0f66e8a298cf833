"""Every dialect's store has every operation of the QueueStore protocol, with the same parameters."""

from __future__ import annotations

import inspect

import pytest

from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db.queue_store import QueueStore
from nsj_queue_lib.db.singlestore.store import SingleStoreQueueStore

OPERATIONS = sorted(
    name
    for name, member in vars(QueueStore).items()
    if callable(member) and not name.startswith("_")
)


def test_the_protocol_lists_the_operations():
    assert {"claim", "complete_and_claim", "insert_task", "find_orphans", "purge_round"} <= set(
        OPERATIONS
    )


@pytest.mark.parametrize(
    "store_class", [PostgresQueueStore, MysqlQueueStore, SingleStoreQueueStore]
)
@pytest.mark.parametrize("name", OPERATIONS)
def test_each_store_takes_the_protocols_parameters(store_class, name):
    expected = inspect.signature(getattr(QueueStore, name))
    actual = inspect.signature(getattr(store_class, name))
    wanted = [p for p in expected.parameters.values()]
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


@pytest.mark.parametrize(
    "store_class", [PostgresQueueStore, MysqlQueueStore, SingleStoreQueueStore]
)
def test_each_store_is_a_queue_store(store_class):
    store: QueueStore = store_class("s.q", "s.q_subscriber")
    assert store.queue_table == "s.q" and store.subscriber_table == "s.q_subscriber"
