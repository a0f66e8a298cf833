"""Galera detection at a worker's start (nsj_queue_lib/db/mysql/galera.py), without a cluster.

The shared MariaDB (``TEST_MYSQL_DSN``) runs without a wsrep provider: it is no Galera
node, so no worker is refused there, whatever its liveness. The refusal itself, on a
real cluster, is in tests/acceptance/test_galera.py.
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.mysql.galera import check_galera, galera_node
from nsj_queue_lib.db.mysql.galera import refusal as galera_refusal
from tests.helpers.mysql_queue import connect, mysql_settings

pytestmark = pytest.mark.mysql


@pytest.fixture
def conn(mysql_kwargs):
    c = connect(mysql_kwargs, autocommit=True)
    try:
        yield c
    finally:
        c.close()


def test_a_mariadb_without_wsrep_is_no_galera_node(conn):
    assert galera_node(conn) is None


@pytest.mark.parametrize("client_server_mode", [False, True])
def test_no_refusal_on_a_single_mariadb_whatever_the_liveness(conn, client_server_mode):
    assert check_galera(conn, client_server_mode, None) is None


def test_a_writer_node_named_on_a_single_mariadb_is_only_reported_as_ignored(conn):
    said = check_galera(conn, False, "node1")
    assert said is not None and "ignored" in said and "wsrep_on is off" in said


def test_the_mysql_driver_checks_the_topology_at_start_and_passes_a_single_mariadb(
    conn, mysql_kwargs
):
    from nsj_queue_lib.db.mysql.driver import MysqlDriver

    settings = mysql_settings(mysql_kwargs, f"{mysql_kwargs['database']}.fila_teste")
    assert MysqlDriver(settings).check_topology(conn) is None


def test_the_refusal_is_a_function_of_the_node_and_the_settings():
    from nsj_queue_lib.db.mysql.galera import GaleraNode

    node = GaleraNode(node_name="n2", cluster_name="c", cluster_size=3, state="Synced")
    [(variable, why)] = galera_refusal(node, False, None).items()
    assert variable == "CLIENT_SERVER_MODE"
    assert "GET_LOCK" in why and "python -m nsj_queue_lib.server" in why
    assert "docs/how-to/galera.md" in why and "QUEUE_GALERA_WRITER_NODE" in why
    assert galera_refusal(node, True, None) == {}
    assert galera_refusal(node, False, "n2") == {}
    assert list(galera_refusal(node, True, "n1")) == ["QUEUE_GALERA_WRITER_NODE"]
