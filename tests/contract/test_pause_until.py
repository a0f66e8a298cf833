"""``pause(until=...)`` keeps its moment exactly (docs/fleet-control.md): past 2038 (a MySQL
TIMESTAMP's end, where FROM_UNIXTIME answered NULL: an indefinite pause) and whatever the
caller's session time zone (MySQL/MariaDB keep ``paused_until`` as a UTC DATETIME, written
and compared in UTC). PostgreSQL and MariaDB.
"""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib.db_gen import render
from tests.helpers.mysql_queue import execute_script
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(60)

BACKENDS = pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
UTC = datetime.timezone.utc


def in_zone(backend, conn, zone: str = "-03:00") -> None:
    """The caller's session in ``zone``: by default three hours behind UTC (a fixed offset
    on MySQL/MariaDB, which needs no time zone tables; PostgreSQL's own zone data)."""
    if backend.family == "postgres":
        if zone == "-03:00":
            zone = "America/Sao_Paulo"
        statement = "SELECT set_config('TimeZone', %s, false)"
    else:
        statement = "SET time_zone = %s"
    with conn.cursor() as cur:
        cur.execute(statement, (zone,))


@BACKENDS
def test_an_until_past_2038_is_kept_exactly(backend):
    until = datetime.datetime(2040, 3, 1, 12, 34, 56, 123456, tzinfo=UTC)
    with backend.transaction() as conn:
        backend.client(conn).pause("p", until=until)
    with backend.transaction() as conn:
        assert backend.client(conn).paused() == [{"processo": "p", "until": until.isoformat()}]


@BACKENDS
def test_an_until_is_exact_whatever_the_callers_time_zone(backend):
    until = backend.now() + datetime.timedelta(seconds=1.5)
    with backend.transaction() as conn:
        in_zone(backend, conn)
        backend.client(conn).pause("p", until=until)
        assert backend.client(conn).paused() == [{"processo": "p", "until": until.isoformat()}]
    with backend.transaction() as conn:  # a UTC session reads the same moment
        assert backend.client(conn).paused() == [{"processo": "p", "until": until.isoformat()}]
    # The claims hold the processo until that moment, and no longer.
    [task] = backend.enqueue([dict(processo="p")])
    worker = backend.run(backend.function_worker(lambda payload, tarefa, bd_conn: "ok"))
    wait_for(lambda: backend.row(task)["status"] == "sucesso", 10, "the task after the until")
    assert backend.row(task)["started_at"] >= until
    assert worker.stop() == 0
    with backend.transaction() as conn:
        in_zone(backend, conn)
        assert backend.client(conn).paused() == []  # expired, in the caller's zone too


@pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True)
def test_an_until_in_a_daylight_saving_fold_is_kept_exactly(backend):
    if not backend.value("SELECT COUNT(*) FROM mysql.time_zone_name"):
        pytest.skip("the server has no time zone tables (mysql_tzinfo_to_sql)")
    # 05:30 UTC on 2030-11-03 is 01:30 EDT, the first of New York's two 01:30s.
    until = datetime.datetime(2030, 11, 3, 5, 30, tzinfo=UTC)
    with backend.transaction() as conn:
        in_zone(backend, conn, "America/New_York")
        backend.client(conn).pause("p", until=until)
    with backend.transaction() as conn:
        assert backend.client(conn).paused() == [{"processo": "p", "until": until.isoformat()}]


@pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True)
def test_the_upgrade_makes_an_earlier_timestamp_until_a_utc_datetime(backend):
    limits = f"{backend.table}_limits"
    until = datetime.datetime(2030, 5, 1, 12, 0, 0, 500000, tzinfo=UTC)
    # A limits table of an earlier build (paused_until a TIMESTAMP), written in UTC.
    backend.execute(f"ALTER TABLE {limits} MODIFY COLUMN paused_until timestamp(6) NULL")
    backend.execute(
        f"INSERT INTO {limits} (processo, paused, paused_until) VALUES ('p', 1, %s)",
        (until.strftime("%Y-%m-%d %H:%M:%S.%f"),),
    )
    # db_gen --upgrade run by a session three hours behind UTC.
    with backend.transaction() as conn:
        in_zone(backend, conn)
        execute_script(conn, render(backend.schema, backend.name, "mysql", upgrade=True))
    column = backend.value(
        "SELECT data_type FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = %s AND column_name = 'paused_until'",
        (backend.schema, f"{backend.name}_limits"),
    )
    assert column == "datetime"
    with backend.transaction() as conn:
        assert backend.client(conn).paused() == [{"processo": "p", "until": until.isoformat()}]
