"""PostgreSQL: LISTEN/NOTIFY, advisory locks, SKIP LOCKED."""

from __future__ import annotations

from nsj_queue_lib.db.dialect import Capabilities, DdlNames, Dialect
from nsj_queue_lib.db.sql_files import read_sql, render


class PostgresDialect(Dialect):
    name = "postgres"
    capabilities = Capabilities(listen_notify=True, skip_locked=True, advisory_locks=True)

    def _parts(self, names: DdlNames) -> dict[str, str]:
        values = names.template_values()
        parts = dict(values)
        parts["indexes"] = render(read_sql("postgres", "indexes.sql"), values).strip()
        parts["subscriber_indexes"] = render(
            read_sql("postgres", "subscriber_indexes.sql"), values
        ).strip()
        parts["trigger"] = render(read_sql("postgres", "trigger.sql"), values).strip()
        parts["claim_function_ddl"] = render(
            read_sql("postgres", "claim_function.sql"), values
        ).strip()
        return parts

    def create_ddl(self, names: DdlNames) -> str:
        return render(read_sql("postgres", "ddl.sql"), self._parts(names))

    def upgrade_ddl(self, names: DdlNames) -> str:
        return render(read_sql("postgres", "upgrade.sql"), self._parts(names))

    def store(self, queue_table: str, subscriber_table: str | None = None):
        from nsj_queue_lib.db.postgres.store import PostgresQueueStore

        return PostgresQueueStore(queue_table, subscriber_table)


DIALECT = PostgresDialect()
