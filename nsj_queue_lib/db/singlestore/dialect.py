"""SingleStore: no SKIP LOCKED, no named locks, no LISTEN/NOTIFY.

Workers claim with conditional updates and take every lock from the socket
server, so a SingleStore worker needs ``CLIENT_SERVER_MODE=true``. The schema
of ``db_gen <schema> <queue>`` is a SingleStore database.
"""

from __future__ import annotations

from nsj_queue_lib.db.dialect import DdlNames, Dialect
from nsj_queue_lib.db.sql_files import read_sql, render
from nsj_queue_lib.exceptions import InvalidIdentifierError


class UpgradeNotSupported(InvalidIdentifierError):
    """``db_gen --upgrade`` for SingleStore.

    A subclass of InvalidIdentifierError only so that ``db_gen`` reports it
    the same way (exit code 2, the message on stderr, nothing on stdout).
    """


UPGRADE_NOT_SUPPORTED = (
    "--upgrade is not supported for singlestore: the idempotent steps of the MySQL upgrade need "
    "user variables and SQL PREPARE/EXECUTE, which SingleStore does not fully support, and "
    "nsj-queue-lib 1.2.2 never printed SingleStore DDL. Compare the table with "
    "'db_gen <schema> <queue> --dialect singlestore' and add what is missing by hand "
    "(columns prioridade, dead, live_id, pub_sub, publication_id, subscriber_id; the indexes; "
    "the subscriber table)."
)


class SingleStoreDialect(Dialect):
    name = "singlestore"

    def create_ddl(self, names: DdlNames) -> str:
        return render(read_sql(self.name, "ddl.sql"), names.template_values())

    def upgrade_ddl(self, names: DdlNames) -> str:
        raise UpgradeNotSupported(UPGRADE_NOT_SUPPORTED)

    def drop_old_routines_ddl(self, names: DdlNames) -> str:
        return "-- SingleStore queues have no claim routine: nothing to drop.\n"


DIALECT = SingleStoreDialect()
