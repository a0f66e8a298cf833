"""SingleStore: PyMySQL like MySQL, without SKIP LOCKED, named locks or LISTEN.

Every lock comes from the socket server, so a SingleStore worker needs
CLIENT_SERVER_MODE=true (``check_settings`` says so at start). Sessions need
no set-up: READ COMMITTED is the only isolation level, and the time zone is
the cluster's.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.driver import driver_capabilities
from nsj_queue_lib.db.mysql.driver import MysqlFamilyDriver
from nsj_queue_lib.db.singlestore.store import SingleStoreQueueStore


class SingleStoreDriver(MysqlFamilyDriver):
    name = "singlestore"
    capabilities = driver_capabilities("SINGLE_STORE")

    @classmethod
    def new_store(cls, queue_table: str, subscriber_table: str | None) -> SingleStoreQueueStore:
        return SingleStoreQueueStore(queue_table, subscriber_table)

    database_name = "SingleStore"

    def configure(self, conn: Any, executor: bool) -> None:
        pass


DRIVER_CLASS = SingleStoreDriver
