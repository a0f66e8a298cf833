"""MariaDB Galera (wsrep): detected at a worker's start, refused where liveness would not hold.

A task's liveness lock on MySQL is a named lock (``GET_LOCK``). On a Galera
cluster named locks are not replicated: ``GET_LOCK('x', 0)`` returns 1 on every
node at once. A worker's retry service on one node therefore sees the tasks
running on the other nodes as abandoned and rescues them: they run twice. So a
worker that finds ``wsrep_on`` refuses to start unless

- its liveness locks live in the socket server (``CLIENT_SERVER_MODE=true``,
  ``python -m nsj_queue_lib.server``: one server for every node's workers), or
- ``QUEUE_GALERA_WRITER_NODE`` names the node it is connected to
  (``wsrep_node_name``): the operator declares that every worker writes through
  that one node, the others being standbys. The worker checks its own
  connection's node at start; it cannot see the other workers' nor a load
  balancer that later moves its connections to another node, so that part
  stays the operator's declaration (docs/how-to/galera.md).

``wsrep_on`` does not exist on MySQL 8, and is OFF on a MariaDB started
without a wsrep provider: both are a single server here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nsj_queue_lib.db.mysql.errors import (
    ER_LOCK_DEADLOCK,
    RETRYABLE_ERRORS,
    error_code,
    wrap_driver_errors,
)
from nsj_queue_lib.exceptions import ConfigError

DOCS = "docs/how-to/galera.md"
# ER_UNKNOWN_COM_ERROR: "WSREP has not yet prepared node for application use" (a node out
# of the primary component, or still joining). Certification failures and brute-force
# aborts come as ER_LOCK_DEADLOCK (1213), already in RETRYABLE_ERRORS with 1205.
ER_WSREP_NOT_READY = 1047
TRANSIENT_ERRORS = (*RETRYABLE_ERRORS, ER_WSREP_NOT_READY)
# Global values: a session may have SET wsrep_on = OFF for itself, the cluster is still one.
VARIABLES_SQL = (
    "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
    "('wsrep_on', 'wsrep_provider', 'wsrep_node_name', 'wsrep_cluster_name')"
)
STATUS_SQL = (
    "SHOW GLOBAL STATUS WHERE Variable_name IN "
    "('wsrep_cluster_size', 'wsrep_local_state_comment', 'wsrep_ready')"
)


def is_transient_error(exc: BaseException) -> bool:
    """A PyMySQL error the same work may be tried again after (deadlock, lock wait timeout,
    Galera certification failure or brute-force abort, a Galera node not ready)."""
    return error_code(exc) in TRANSIENT_ERRORS


def rollback(conn: Any) -> None:
    """ROLLBACK, where an error 1213 means done: on Galera a transaction that a replicated
    one aborted (a brute-force abort, the server rolled it back) answers its next
    statement with 1213, a ROLLBACK too; so does a deadlock victim anywhere."""
    try:
        conn.rollback()
    except Exception as exc:
        if error_code(exc) != ER_LOCK_DEADLOCK:
            raise


@dataclasses.dataclass(frozen=True)
class GaleraNode:
    """What a connection's server says of its Galera cluster."""

    node_name: str
    cluster_name: str
    cluster_size: int | None
    state: str  # wsrep_local_state_comment: Synced, Donor/Desynced, Joined, ...

    def describe(self) -> str:
        size = "?" if self.cluster_size is None else str(self.cluster_size)
        return (
            f"MariaDB Galera node {self.node_name!r} of cluster {self.cluster_name!r} "
            f"({size} nodes, {self.state})"
        )


def galera_node(conn: Any) -> GaleraNode | None:
    """The Galera node ``conn`` is connected to, or None when wsrep is off or unknown
    (MySQL, a MariaDB without a wsrep provider)."""
    with wrap_driver_errors("wsrep_variables"), conn.cursor() as cur:
        cur.execute(VARIABLES_SQL)
        variables = {str(name).lower(): str(value) for name, value in cur.fetchall()}
        if variables.get("wsrep_on", "OFF").upper() not in ("ON", "1"):
            return None
        if variables.get("wsrep_provider", "none").strip().lower() in ("", "none"):
            return None
        cur.execute(STATUS_SQL)
        status = {str(name).lower(): str(value) for name, value in cur.fetchall()}
    size = status.get("wsrep_cluster_size", "")
    return GaleraNode(
        node_name=variables.get("wsrep_node_name", ""),
        cluster_name=variables.get("wsrep_cluster_name", ""),
        cluster_size=int(size) if size.isdigit() else None,
        state=status.get("wsrep_local_state_comment", "unknown"),
    )


def refusal(node: GaleraNode, client_server_mode: bool, writer_node: str | None) -> dict[str, str]:
    """{variable: why} when a worker on ``node`` must not start, empty when it may."""
    if writer_node:
        if writer_node != node.node_name:
            return {
                "QUEUE_GALERA_WRITER_NODE": (
                    f"names {writer_node!r}, but this worker is connected to "
                    f"{node.describe()}: every worker must write through the one node named "
                    f"there (point DB_HOST at it, or fix the setting; see {DOCS})"
                )
            }
        return {}
    if client_server_mode:
        return {}
    return {
        "CLIENT_SERVER_MODE": (
            f"must be true on {node.describe()}: the liveness locks (GET_LOCK) are held on "
            "one node only, so the retry service of a worker on another node would rescue "
            "the tasks running here and they would run twice. Run the socket server "
            "(python -m nsj_queue_lib.server, one for the whole cluster) and set "
            "CLIENT_SERVER_MODE=true on every worker, or, if every worker writes through "
            f"one node, set QUEUE_GALERA_WRITER_NODE to that node's wsrep_node_name ({DOCS})"
        )
    }


def check_galera(conn: Any, client_server_mode: bool, writer_node: str | None) -> str | None:
    """At a worker's start: raise ``ConfigError`` when it runs on Galera with liveness
    locks that do not hold there; else what it found (a line to log), or None off Galera."""
    node = galera_node(conn)
    if node is None:
        if writer_node:
            return (
                f"QUEUE_GALERA_WRITER_NODE={writer_node!r} is set but the database is not a "
                "Galera node (wsrep_on is off): the setting is ignored"
            )
        return None
    problems = refusal(node, client_server_mode, writer_node)
    if problems:
        raise ConfigError(problems)
    how = (
        f"every worker writes through node {writer_node!r} (QUEUE_GALERA_WRITER_NODE)"
        if writer_node
        else "liveness locks in the socket server (CLIENT_SERVER_MODE)"
    )
    return f"on {node.describe()}: {how}"
