"""Private PostgreSQL and MariaDB servers on free TCP ports, and certificates for them.

The TLS and failover tests need servers they may configure (TLS on, a
streaming replica, a primary stopped mid-run); the shared ones on 5432/3306
are never touched. Each server here lives in a temporary directory, listens
on 127.0.0.1 only and is stopped by ``close()``. The certificates are made
with ``openssl`` by the test: a CA, a server certificate for ``localhost`` /
127.0.0.1 signed by it, a client certificate, and an unrelated CA.

PostgreSQL runs from the Debian binaries (/usr/lib/postgresql/<version>/bin)
as the ``postgres`` user when the tests run as root (it refuses root).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers.endpoints import free_port

STARTUP_SECONDS = 30
START_ATTEMPTS = 3


def _run(args: list[str], user: str | None = None, **kwargs) -> str:
    if user is not None and os.geteuid() == 0:
        args = ["runuser", "-u", user, "--", *args]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


# -- certificates -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    wrong_ca: Path  # a CA that signed nothing here


def _openssl(directory: Path, *args: str) -> None:
    _run(["openssl", *args], cwd=directory)


def _self_signed_ca(directory: Path, name: str) -> None:
    _openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt")  # fmt: skip


def _signed(directory: Path, name: str, subject: str, extensions: str | None) -> None:
    _openssl(directory, "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
             "-keyout", f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.crt"]  # fmt: skip
    if extensions:
        (directory / f"{name}.ext").write_text(extensions)
        args += ["-extfile", f"{name}.ext"]
    _openssl(directory, *args)


def make_certificates(directory: Path) -> Certificates:
    """A CA, a server certificate for localhost/127.0.0.1, a client certificate, a wrong CA."""
    directory.mkdir(parents=True, exist_ok=True)
    _self_signed_ca(directory, "ca")
    _self_signed_ca(directory, "wrong")
    _signed(directory, "server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _signed(directory, "client", "/CN=postgres", None)
    for key in directory.glob("*.key"):
        key.chmod(0o600)
    return Certificates(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        wrong_ca=directory / "wrong.crt",
    )


# -- PostgreSQL ---------------------------------------------------------------------------


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        raise RuntimeError("no PostgreSQL binaries in /usr/lib/postgresql/*/bin")
    return Path(found[-1]).parent


class PrivatePostgres:
    """A PostgreSQL cluster of its own on a free port: a new primary, or a streaming
    replica of ``primary`` (``pg_basebackup -R``)."""

    def __init__(
        self,
        directory: Path,
        certificates: Certificates | None = None,
        primary: PrivatePostgres | None = None,
    ) -> None:
        self.bin = postgres_bin()
        self.port = free_port()
        self.data = directory / f"pg{self.port}"
        self.user = "postgres" if os.geteuid() == 0 else None
        directory.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            owner = pwd.getpwnam(self.user)
            os.chown(directory, owner.pw_uid, owner.pw_gid)
        if primary is None:
            self._initdb(certificates)
        else:
            self._run("pg_basebackup", "-D", str(self.data), "-h", "127.0.0.1",
                      "-p", str(primary.port), "-U", "postgres", "-R", "-X", "stream")  # fmt: skip
        self.running = False
        self.start()

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, program: str, *args: str) -> str:
        return _run([str(self.bin / program), *args], user=self.user)

    def _initdb(self, certificates: Certificates | None) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        settings = [
            "listen_addresses = '127.0.0.1'",
            "unix_socket_directories = ''",
            "fsync = off",
            "wal_level = replica",
            "max_wal_senders = 4",
            "shared_buffers = 16MB",
        ]
        hba = ["host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"]
        if certificates is not None:
            for name in ("ca", "server_cert", "server_key"):
                target = self.data / f"{name}.pem"
                shutil.copy(getattr(certificates, name), target)
                self._own(target)
            settings += [
                "ssl = on",
                "ssl_cert_file = 'server_cert.pem'",
                "ssl_key_file = 'server_key.pem'",
                "ssl_ca_file = 'ca.pem'",
            ]
            # TLS only; database ``certdb`` wants a client certificate signed by the CA.
            hba = [
                "hostssl certdb all 127.0.0.1/32 cert",
                "hostssl all all 127.0.0.1/32 trust",
                "hostssl replication all 127.0.0.1/32 trust",
            ]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
        (self.data / "pg_hba.conf").write_text("\n".join(hba) + "\n")

    def _own(self, path: Path) -> None:
        if self.user is not None:
            owner = pwd.getpwnam(self.user)
            os.chown(path, owner.pw_uid, owner.pw_gid)
        path.chmod(0o600)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-o", f"-p {self.port}",
                  "-l", str(self.data / "log"), "-w", "-t", str(STARTUP_SECONDS), "start")  # fmt: skip
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")
        self.running = False

    def promote(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def log_text(self) -> str:
        with contextlib.suppress(OSError):
            return (self.data / "log").read_text(errors="replace")
        return ""

    def close(self) -> None:
        if self.running:
            with contextlib.suppress(Exception):
                self.stop("immediate")


# -- MariaDB ------------------------------------------------------------------------------


class PrivateMariadb:
    """A MariaDB server of its own (``mariadb-install-db``, ``mariadbd``) on a free port,
    with TLS from ``certificates``; user root, empty password, database ``test``."""

    def __init__(self, directory: Path, certificates: Certificates) -> None:
        # A port free when picked can be taken before mariadbd binds it (another test's
        # private servers, a Galera node's ports): such a start fails fast (the server
        # exits, or the port answers no MySQL handshake) and is tried on another port.
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start(directory, certificates)
                return
            except RuntimeError:
                if attempt == START_ATTEMPTS:
                    raise

    def _start(self, directory: Path, certificates: Certificates) -> None:
        self.port = free_port()
        self.data = directory / f"mariadb{self.port}"
        # Its own temporary directory: in the shared /tmp a bootstrap once failed, its
        # temporary table gone before it removed it ("Could not remove temporary table").
        tmp = directory / f"mariadb{self.port}-tmp"
        tmp.mkdir(parents=True)
        _run(["mariadb-install-db", "--no-defaults", f"--datadir={self.data}", "--user=root",
              f"--tmpdir={tmp}", "--auth-root-authentication-method=normal",
              "--skip-test-db"])  # fmt: skip
        (self.data / "test").mkdir()
        self._log = (directory / f"mariadb{self.port}.log").open("w")
        self.process = subprocess.Popen(
            [
                "/usr/sbin/mariadbd",
                "--no-defaults",
                f"--datadir={self.data}",
                f"--tmpdir={tmp}",
                "--user=root",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.data}/sock",
                f"--pid-file={self.data}/pid",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=16M",
                f"--ssl-ca={certificates.ca}",
                f"--ssl-cert={certificates.server_cert}",
                f"--ssl-key={certificates.server_key}",
            ],  # fmt: skip
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        import pymysql

        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                pymysql.connect(
                    host="127.0.0.1",
                    port=self.port,
                    user="root",
                    password="",
                    connect_timeout=2,
                    read_timeout=5,
                ).close()
                return
            except pymysql.err.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError("the private MariaDB did not start") from None
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"mysql://root:@127.0.0.1:{self.port}/test"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


@contextlib.contextmanager
def temporary_directory(prefix: str):
    """A temporary directory any user can enter (the postgres user writes below it)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
