"""A private 3-node MariaDB Galera cluster on free local ports, for the Galera tests.

``GaleraCluster(directory, nodes=3).start()`` makes one data directory
(``mariadb-install-db``) and copies it to every node (so no state transfer has to
move data at start: a joiner still needs an SST, done with ``rsync``), bootstraps
node 1 with ``--wsrep-new-cluster``, starts nodes 2 and 3 (in parallel) and waits
until every node reports ``wsrep_cluster_size`` = the cluster's size and
``wsrep_local_state_comment`` = ``Synced``. ``kill(i)`` sends SIGKILL to one
node's ``mariadbd``; ``close()`` kills what is left (never a process left behind,
also when a start fails half way).

The servers are made to start fast: 8 MiB buffer pool, small redo log, no
performance_schema, no binary log beyond what wsrep needs, fsync off
(``innodb_flush_log_at_trx_commit=0``, ``innodb_doublewrite=0``), a small gcache.

``galera_unavailable()`` says why a cluster cannot run here (no ``mariadbd``, no
galera-4 provider, no ``rsync``), or None. The ``galera_cluster`` fixture
(module scope; import it into a test module) skips with that reason, or fails
under ``CI=true`` as the suite does for a missing MariaDB.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.databases import ci_enabled
from tests.helpers.private_servers import free_port, temporary_directory

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "mariadb-install-db"
PROVIDER = "/usr/lib/galera/libgalera_smm.so"
START_SECONDS = 90  # a joiner's rsync SST on a loaded 2-core machine


START_ATTEMPTS = 2


def galera_unavailable() -> str | None:
    """Why a Galera cluster cannot be started on this machine, or None."""
    if not os.access(MARIADBD, os.X_OK):
        return f"MariaDB is not installed ({MARIADBD} missing; apt-get install mariadb-server)"
    if shutil.which(INSTALL_DB) is None:
        return f"{INSTALL_DB} is not on PATH (apt-get install mariadb-server)"
    if not os.path.exists(PROVIDER):
        return (
            f"the Galera provider is not installed ({PROVIDER} missing; apt-get install galera-4)"
        )
    if shutil.which("rsync") is None:
        return "rsync is missing (the joiners' state transfer uses it; apt-get install rsync)"
    if shutil.which("wsrep_sst_rsync") is None:
        return "wsrep_sst_rsync is missing (part of mariadb-server)"
    return None


def _server_user() -> str:
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam("mysql")
    except KeyError:
        return "root"
    return "mysql"


def _chown_tree(directory: Path, user: str) -> None:
    if os.geteuid() != 0 or user == "root":
        return
    owner = pwd.getpwnam(user)
    for root, dirs, files in os.walk(directory):
        os.chown(root, owner.pw_uid, owner.pw_gid)
        for name in dirs + files:
            os.lchown(os.path.join(root, name), owner.pw_uid, owner.pw_gid)


def connect(port: int, database: str | None = "test", **extra: Any):
    import pymysql

    return pymysql.connect(
        host="127.0.0.1",
        port=port,
        user="root",
        password="",
        database=database,
        autocommit=True,
        connect_timeout=5,
        **extra,
    )


def status(port: int, name: str) -> str | None:
    """``SHOW STATUS LIKE name`` on a node, or None when it does not answer."""
    import pymysql

    try:
        conn = connect(port, database=None)
    except pymysql.err.MySQLError:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW STATUS LIKE %s", (name,))
            row = cur.fetchone()
            return None if row is None else str(row[1])
    except pymysql.err.MySQLError:
        return None
    finally:
        conn.close()


class GaleraNode:
    def __init__(self, cluster: GaleraCluster, index: int) -> None:
        self.cluster = cluster
        self.index = index
        self.name = f"node{index}"
        self.port = free_port()
        self.galera_port = free_port()
        self.ist_port = free_port()
        self.sst_port = free_port()
        self.data = cluster.directory / self.name
        self.tmp = cluster.directory / f"{self.name}-tmp"
        self.log_path = cluster.directory / f"{self.name}.log"
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"mysql://root:@127.0.0.1:{self.port}/test"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def arguments(self, bootstrap: bool) -> list[str]:
        c = self.cluster
        address = "gcomm://" + ",".join(
            f"127.0.0.1:{n.galera_port}" for n in c.nodes if n is not self or bootstrap
        )
        if bootstrap:
            address = "gcomm://"
        provider_options = ";".join(
            [
                f"gmcast.listen_addr=tcp://127.0.0.1:{self.galera_port}",
                f"ist.recv_addr=127.0.0.1:{self.ist_port}",
                "gcache.size=32M",
                "gcache.page_size=32M",
                # Notice a killed node within ~5 s (the defaults take 5-15 s). PT3S let
                # the two survivors of a kill suspect each other under a loaded suite
                # once, leaving them a non-primary pair for over 30 s.
                "evs.suspect_timeout=PT5S",
                "evs.inactive_timeout=PT10S",
                "evs.keepalive_period=PT0.5S",
                "evs.inactive_check_period=PT0.5S",
                "pc.weight=1",
            ]
        )
        args = [
            MARIADBD,
            "--no-defaults",
            f"--datadir={self.data}",
            f"--tmpdir={self.tmp}",
            f"--user={self.cluster.user}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.cluster.directory}/{self.name}.sock",
            f"--pid-file={self.cluster.directory}/{self.name}.pid",
            "--skip-name-resolve",
            "--performance-schema=OFF",
            "--innodb-buffer-pool-size=8M",
            "--innodb-log-file-size=16M",
            "--innodb-log-buffer-size=4M",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
            "--innodb-flush-method=nosync",
            "--skip-innodb-adaptive-hash-index",
            "--max-connections=300",
            "--binlog-format=ROW",
            "--default-storage-engine=InnoDB",
            "--innodb-autoinc-lock-mode=2",
        ]
        if not c.wsrep:  # the benchmark's baseline: the same server, no replication
            return args
        args += [
            "--wsrep-on=ON",
            f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-address={address}",
            f"--wsrep-cluster-name={c.name}",
            f"--wsrep-node-name={self.name}",
            "--wsrep-node-address=127.0.0.1",
            f"--wsrep-node-incoming-address=127.0.0.1:{self.port}",
            f"--wsrep-sst-receive-address=127.0.0.1:{self.sst_port}",
            "--wsrep-sst-method=rsync",
            f"--wsrep-provider-options={provider_options}",
            f"--wsrep-slave-threads={c.applier_threads}",
        ]
        if bootstrap:
            args.append("--wsrep-new-cluster")
        return args

    def spawn(self, bootstrap: bool = False) -> None:
        if self.alive():
            raise RuntimeError(f"{self.name} is running already")
        self.starts += 1
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                self.arguments(bootstrap),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group: kill() also ends the SST scripts it started.
                start_new_session=True,
            )
        finally:
            log.close()

    def synced(self) -> bool:
        return status(self.port, "wsrep_local_state_comment") == "Synced"

    def wait_synced(self, cluster_size: int, timeout: float = START_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise RuntimeError(
                    f"galera {self.name} exited ({self.process.returncode if self.process else '?'})"
                    f" while starting; log tail:\n{self.log_tail()}"
                )
            if not self.cluster.wsrep and status(self.port, "Uptime") is not None:
                return
            if (
                self.synced()
                and status(self.port, "wsrep_cluster_size") == str(cluster_size)
                and status(self.port, "wsrep_ready") == "ON"
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"galera {self.name} not Synced in a cluster of {cluster_size} after "
                    f"{timeout:g} s; log tail:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL to mariadbd (and what it started: SST scripts, rsync)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)

    def stop(self, timeout: float = 30) -> None:
        """A clean shutdown (SIGTERM), SIGKILL past ``timeout``."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


class GaleraCluster:
    """``nodes`` MariaDB servers in one Galera cluster, on 127.0.0.1 and free ports."""

    def __init__(
        self, directory: Path, nodes: int = 3, applier_threads: int = 2, wsrep: bool = True
    ) -> None:
        """``wsrep=False``: one plain MariaDB with the same settings (a benchmark's baseline)."""
        self.directory = Path(directory)
        self.wsrep = wsrep
        self.name = f"nsjq{os.getpid()}"
        self.applier_threads = applier_threads
        self.nodes = [GaleraNode(self, i + 1) for i in range(nodes)]
        self.start_seconds: float | None = None
        # The joiner's rsync daemon, started by mariadbd, runs as root's "nobody" when
        # mariadbd runs as root and then cannot write the data directory: as root, the
        # cluster runs as the ``mysql`` user (mariadbd drops to it), as PostgreSQL does.
        self.user = _server_user()

    def __getitem__(self, index: int) -> GaleraNode:
        return self.nodes[index]

    def start(self) -> GaleraCluster:
        """Install, bootstrap node 1, join the others; on any failure everything is killed."""
        began = time.monotonic()
        try:
            self._install()
            first, *others = self.nodes
            first.spawn(bootstrap=True)
            first.wait_synced(1)
            for node in others:
                node.spawn()
            # Joiners SST one after the other anyway (the donor serves one at a time),
            # but waiting for them together saves the polling gaps.
            with ThreadPoolExecutor(len(others) or 1) as pool:
                list(pool.map(lambda n: n.wait_synced(len(self.nodes)), others))
            first.wait_synced(len(self.nodes))
        except BaseException:
            self.close()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _install(self) -> None:
        template = self.directory / "template"
        tmp = self.directory / "install-tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        _chown_tree(self.directory, self.user)
        done = subprocess.run(
            [
                INSTALL_DB,
                "--no-defaults",
                f"--datadir={template}",
                f"--user={self.user}",
                f"--tmpdir={tmp}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--innodb-buffer-pool-size=8M",
                "--innodb-log-file-size=16M",
            ],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{INSTALL_DB} failed ({done.returncode}): {done.stderr[-2000:]}")
        (template / "test").mkdir()
        # Every node starts from the same files; the joiners still get an SST (they have
        # no grastate), which rsync makes quick as the files barely differ.
        for node in self.nodes:
            shutil.copytree(template, node.data, symlinks=True)
            node.tmp.mkdir()
        shutil.rmtree(template, ignore_errors=True)
        _chown_tree(self.directory, self.user)

    def restart(self, index: int, timeout: float = START_SECONDS) -> GaleraNode:
        """Start node ``index`` (0-based) again after a kill or stop; it rejoins the others."""
        node = self.nodes[index]
        node.kill()
        node.spawn()
        node.wait_synced(self.size_alive(), timeout)
        return node

    def size_alive(self) -> int:
        return sum(1 for n in self.nodes if n.alive())

    def wait_size(self, size: int, timeout: float = 30) -> None:
        """Wait until every live node sees a primary component of ``size`` nodes."""
        deadline = time.monotonic() + timeout
        while True:
            seen = {
                n.name: (status(n.port, "wsrep_cluster_size"), status(n.port, "wsrep_ready"))
                for n in self.nodes
                if n.alive()
            }
            if all(v == (str(size), "ON") for v in seen.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"cluster size not {size} after {timeout:g} s: {seen}\n{self.logs(30)}"
                )
            time.sleep(0.1)

    def kill(self, index: int) -> None:
        """kill -9 of node ``index``'s mariadbd (0-based)."""
        self.nodes[index].kill()

    def close(self) -> None:
        for node in self.nodes:
            node.kill()

    def logs(self, lines: int = 60) -> str:
        return "\n".join(f"--- {n.name} ---\n{n.log_tail(lines)}" for n in self.nodes)


@contextlib.contextmanager
def galera_cluster_of(nodes: int = 3, wsrep: bool = True) -> Iterator[GaleraCluster]:
    """A started cluster for a ``with`` block; killed and its files removed at the end.

    A start that fails is tried once more from scratch, on new ports: now and then a
    joiner never joins (a port picked as free taken meanwhile on a busy machine)."""
    for attempt in range(1, START_ATTEMPTS + 1):
        with temporary_directory("nsjq-galera-") as directory:
            cluster = GaleraCluster(directory, nodes, wsrep=wsrep)
            try:
                cluster.start()
            except RuntimeError as exc:
                if attempt == START_ATTEMPTS:
                    raise
                print(f"galera: start {attempt} failed, starting again ({str(exc)[:200]})")
                continue
            try:
                yield cluster
            finally:
                cluster.close()
            return


def _unavailable(reason: str) -> None:
    if ci_enabled():
        pytest.fail(f"{reason} (CI=true: a missing Galera fails the run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def galera_cluster() -> Iterator[GaleraCluster]:
    """A 3-node Galera cluster shared by a module's tests (they may kill and restart nodes;
    each test should leave every node running, see ``GaleraCluster.restart``)."""
    reason = galera_unavailable()
    if reason is not None:
        _unavailable(reason)
    with galera_cluster_of(3) as cluster:
        yield cluster
