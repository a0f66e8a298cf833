"""The vacuum service's decisions (runtime/vacuum.py), on a store that only answers: past the
threshold it vacuums; a worker whose user may not vacuum the table says so once; a database
that keeps its statistics itself has no vacuum service."""

from __future__ import annotations

import logging
import threading
from typing import Any

from nsj_queue_lib.db.driver import driver_capabilities
from nsj_queue_lib.db.queue_store import HotSpace, TableHealth
from nsj_queue_lib.runtime.schedule import IntervalSchedule
from nsj_queue_lib.runtime.vacuum import COMPACT_MIN_BYTES, VacuumService, worth_compacting
from nsj_queue_lib.settings import Settings


class Store:
    def __init__(self, health: TableHealth | None):
        self.health = health
        self.vacuums = 0
        self.analyzes = 0
        self.space: HotSpace | None = None  # the plain layout's: none
        self.granted = True
        self.compactions = 0

    def table_health(self, conn: Any) -> TableHealth | None:
        return self.health

    def vacuum(self, conn: Any) -> None:
        self.vacuums += 1

    def analyze(self, conn: Any) -> None:
        self.analyzes += 1

    def hot_space(self, conn: Any) -> HotSpace | None:
        return self.space

    def compact_hot(self, conn: Any, lock_timeout_ms: int) -> bool:
        if self.granted:
            self.compactions += 1
            assert self.space is not None
            self.space = HotSpace(self.space.live_bytes, self.space.live_bytes, 0)
        return self.granted


def service(store: Store, dead_rows: int = 100) -> VacuumService:
    settings = Settings(
        db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q",
        queue_vacuum_dead_rows=dead_rows,
    )  # fmt: skip
    return VacuumService(
        settings,
        store,
        None,
        None,
        threading.Event(),
        IntervalSchedule(60),  # type: ignore[arg-type]
    )


def test_past_the_threshold_it_vacuums_below_it_does_not():
    store = Store(TableHealth(dead_rows=99, changed_since_analyze=0, may_maintain=True))
    assert service(store).work(None) == 0 and store.vacuums == 0
    store.health = TableHealth(dead_rows=100, changed_since_analyze=0, may_maintain=True)
    assert service(store).work(None) == 100 and store.vacuums == 1


def test_rows_changed_without_dead_versions_refresh_the_statistics_only():
    store = Store(TableHealth(dead_rows=10, changed_since_analyze=5000, may_maintain=True))
    assert service(store).work(None) == 0
    assert (store.vacuums, store.analyzes) == (0, 1)
    store.health = TableHealth(dead_rows=10, changed_since_analyze=99, may_maintain=True)
    assert service(store).work(None) == 0
    assert (store.vacuums, store.analyzes) == (0, 1)


def test_a_user_that_may_not_vacuum_is_told_once(caplog):
    store = Store(TableHealth(dead_rows=5000, changed_since_analyze=0, may_maintain=False))
    vacuum = service(store)
    with caplog.at_level(logging.WARNING):
        assert vacuum.work(None) == 0
        assert vacuum.work(None) == 0
    assert store.vacuums == 0 and store.analyzes == 0
    assert len([r for r in caplog.records if "cannot VACUUM" in r.getMessage()]) == 1


def test_a_database_without_statistics_to_act_on_is_left_alone():
    store = Store(None)
    assert service(store).work(None) == 0 and store.vacuums == 0


def test_postgresql_and_mysql_get_the_vacuum_service_singlestore_does_not():
    """MySQL's for its statistics alone (no dead rows to count); SingleStore keeps its own."""
    assert driver_capabilities("POSTGRES").table_maintenance
    assert driver_capabilities("MYSQL").table_maintenance
    assert not driver_capabilities("SINGLE_STORE").table_maintenance


MB = 1024 * 1024
DIRTY = TableHealth(dead_rows=5000, changed_since_analyze=0, may_maintain=True)


def test_a_hot_partition_mostly_free_space_is_worth_rewriting_once_its_dead_rows_are_gone():
    assert worth_compacting(HotSpace(COMPACT_MIN_BYTES, 0, 0), 100)
    assert not worth_compacting(HotSpace(COMPACT_MIN_BYTES - 1, 0, 0), 100)  # small
    assert not worth_compacting(HotSpace(64 * MB, 8 * MB, 0), 100)  # its rows fill it
    assert worth_compacting(HotSpace(64 * MB, 7 * MB, 0), 100)
    assert not worth_compacting(HotSpace(64 * MB, 0, 100), 100)  # a snapshot kept them


def test_after_a_vacuum_a_bloated_hot_partition_is_rewritten(caplog):
    store = Store(DIRTY)
    store.space = HotSpace(40 * MB, 0, 0)
    with caplog.at_level(logging.INFO, logger="nsj_queue_lib.vacuum"):
        service(store, dead_rows=1000).work(None)
    assert (store.vacuums, store.compactions) == (1, 1)
    assert "rewrote the hot partition from 41.9 MB to 0.0 MB" in caplog.text


def test_a_rewrite_whose_lock_is_not_granted_waits_for_the_next_cycle(caplog):
    store = Store(DIRTY)
    store.space = HotSpace(40 * MB, 0, 0)
    store.granted = False
    with caplog.at_level(logging.INFO, logger="nsj_queue_lib.vacuum"):
        service(store, dead_rows=1000).work(None)
    assert store.compactions == 0
    assert "its lock was not granted" in caplog.text


def test_a_refused_rewrite_is_tried_again_at_a_cycle_with_nothing_to_vacuum():
    store = Store(DIRTY)
    store.space = HotSpace(40 * MB, 0, 0)
    store.granted = False
    service(store, dead_rows=1000).work(None)
    assert (store.vacuums, store.compactions) == (1, 0)
    store.health = TableHealth(dead_rows=10, changed_since_analyze=10, may_maintain=True)
    store.granted = True
    service(store, dead_rows=1000).work(None)
    assert (store.vacuums, store.analyzes, store.compactions) == (1, 0, 1)


def test_no_rewrite_while_dead_rows_wait_or_without_a_hot_partition_or_rights():
    store = Store(DIRTY)
    store.space = HotSpace(40 * MB, 0, 5000)  # the vacuum left them: a snapshot holds them
    service(store, dead_rows=1000).work(None)
    assert (store.vacuums, store.compactions) == (1, 0)
    plain = Store(DIRTY)  # hot_space() is None
    service(plain, dead_rows=1000).work(None)
    assert (plain.vacuums, plain.compactions) == (1, 0)
    refused = Store(TableHealth(dead_rows=10, changed_since_analyze=0, may_maintain=False))
    refused.space = HotSpace(40 * MB, 0, 0)
    service(refused, dead_rows=1000).work(None)
    assert refused.compactions == 0
