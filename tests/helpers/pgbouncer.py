"""A PgBouncer of the test suite's own, in front of the test PostgreSQL (docs/how-to/poolers.md).

Debian's ``pgbouncer`` (``.ci/run`` installs it when missing). It refuses to
run as root, so as root it runs as the ``postgres`` user. Its configuration,
auth file and log live in a temporary directory; it listens on a free port of
127.0.0.1 with trust authentication and forwards to the test database.

In transaction mode it has fewer server connections than the workers have
client connections, so server connections really change hands; with
``reset_always`` it runs ``DISCARD ALL`` between transactions
(``server_reset_query_always = 1``), without it (PgBouncer's default) a server
connection keeps whatever session state the previous client left.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.helpers.endpoints import free_port
from tests.helpers.processes import dsn_params

BINARIES = ("pgbouncer", "/usr/sbin/pgbouncer")
START_TIMEOUT = 10.0
POOL_SIZES = {"session": 40, "transaction": 6}


class PgBouncerUnavailable(Exception):
    pass


def pgbouncer_binary() -> str:
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    raise PgBouncerUnavailable(
        "pgbouncer is not installed (apt-get install pgbouncer; .ci/run installs it)"
    )


class PgBouncer:
    def __init__(self, upstream_dsn: str, mode: str, reset_always: bool = True):
        binary = pgbouncer_binary()
        self.mode = mode
        self.port = free_port()
        up = dsn_params(upstream_dsn)
        self.user, self.dbname = up["user"], up["dbname"]
        self.dir = Path(tempfile.mkdtemp(prefix=f"nsjq-pgbouncer-{mode}-"))
        self.log = self.dir / "pgbouncer.log"
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        config = self.dir / "pgbouncer.ini"
        config.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"{self.dbname} = host={up['host']} port={up['port']} dbname={self.dbname} "
                    f"user={self.user}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.dir / 'users.txt'}",
                    f"pool_mode = {mode}",
                    f"default_pool_size = {POOL_SIZES[mode]}",
                    "max_client_conn = 500",
                    "server_reset_query = DISCARD ALL",
                    f"server_reset_query_always = {int(reset_always)}",
                    "ignore_startup_parameters = extra_float_digits",
                    f"logfile = {self.log}",
                    "",
                ]
            )
        )
        user = None
        if os.geteuid() == 0:  # pgbouncer refuses to run as root
            user = "postgres"
            owner = pwd.getpwnam(user)
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self.proc = subprocess.Popen(
            [binary, str(config)],
            user=user,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.dbname}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise PgBouncerUnavailable(f"pgbouncer exited: {self.log_text()[-2000:]}")
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    self.close()
                    raise PgBouncerUnavailable(
                        f"pgbouncer did not answer: {self.log_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
