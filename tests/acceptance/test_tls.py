"""TLS on both dialects, against private servers whose certificates the test makes.

A private PostgreSQL (TLS only: ``hostssl`` lines) and a private MariaDB
(``--ssl-*``) use a CA made here with ``openssl``. The settings' TLS
variables (given as DSN options) reach psycopg and PyMySQL: verify-full
connects and the session is encrypted; a certificate signed by another CA
is refused at once with a message naming the variables to check; a client
certificate is sent when the server asks for one. A worker then runs a task
over TLS. The shared servers on 5432/3306 are not touched.
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.exceptions import DatabaseAccessError
from nsj_queue_lib.settings import Settings
from tests.helpers import databases
from tests.helpers.private_servers import (
    PrivateMariadb,
    PrivatePostgres,
    make_certificates,
    temporary_directory,
)
from tests.helpers.processes import (
    InProcessWorker,
    function_worker,
    wait_for,
    worker_env,
    workers_of,
)
from tests.helpers.recorder import WORKER

# One worker runs the module: its private PostgreSQL and MariaDB start once (module fixtures).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.xdist_group("tls")]
QUEUE = {"QUEUE_NAME": "tls_probe", "QUEUE_TABLE": "tls_probe"}


def _unavailable(what: str, exc: Exception):
    reason = f"cannot start a private {what}: {exc}"
    if databases.ci_enabled():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def tls_directory():
    with temporary_directory("nsjq-tls-") as directory:
        yield directory


@pytest.fixture(scope="module")
def certificates(tls_directory):
    return make_certificates(tls_directory / "certs")


@pytest.fixture(scope="module")
def tls_pg(tls_directory, certificates):
    try:
        server = PrivatePostgres(tls_directory / "pg", certificates)
    except Exception as exc:  # no binaries or they cannot start here
        _unavailable("PostgreSQL", exc)
    yield server
    server.close()


@pytest.fixture(scope="module")
def tls_mariadb(tls_directory, certificates):
    try:
        server = PrivateMariadb(tls_directory / "mariadb", certificates)
    except Exception as exc:
        _unavailable("MariaDB", exc)
    yield server
    server.close()


def settings(**variables: str) -> Settings:
    return Settings.from_env({**QUEUE, **variables})


def test_postgres_verify_full_connects_encrypted(tls_pg, certificates):
    url = (
        f"postgresql://postgres@localhost:{tls_pg.port}/postgres"
        f"?sslmode=verify-full&sslrootcert={certificates.ca}"
    )
    conn = make_driver(settings(DATABASE_URL=url)).connect()
    try:
        [(encrypted,)] = conn.execute(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ).fetchall()
    finally:
        conn.close()
    assert encrypted is True


def test_postgres_with_a_certificate_of_another_ca_is_refused_clearly(tls_pg, certificates):
    s = settings(
        DB_HOST="127.0.0.1",
        DB_PORT=str(tls_pg.port),
        DB_BASE="postgres",
        DB_USER="postgres",
        DB_SSLMODE="verify-ca",
        DB_SSLROOTCERT=str(certificates.wrong_ca),
    )
    with pytest.raises(DatabaseAccessError) as refused:
        make_driver(s).connect()
    assert "certificate verify failed" in str(refused.value)
    assert "DB_SSLROOTCERT" in str(refused.value)


def test_a_worker_process_given_the_wrong_ca_stops_at_start_with_exit_code_2(
    tls_pg, certificates, request
):
    env = worker_env(
        tls_pg.dsn,
        "public.tls_wrong_ca",
        DB_SSLMODE="verify-full",
        DB_SSLROOTCERT=str(certificates.wrong_ca),
    )
    with workers_of(request) as workers:
        worker = workers.start(WORKER, env, "wrong-ca")
        assert worker.wait(30) == 2, worker.output()[-3000:]
        last = worker.last_line()
        assert "certificate verify failed" in last and "DB_SSLROOTCERT" in last, last
        assert "retrying" not in worker.output()


def test_postgres_sends_the_client_certificate(tls_pg, certificates):
    admin = make_driver(settings(DATABASE_URL=f"{tls_pg.dsn} sslmode=require")).connect()
    try:
        admin.execute("CREATE DATABASE certdb")
    finally:
        admin.close()
    base = dict(DATABASE_URL=f"host=127.0.0.1 port={tls_pg.port} user=postgres dbname=certdb")
    with pytest.raises(DatabaseAccessError):
        make_driver(settings(**base, DB_SSLMODE="require")).connect()
    conn = make_driver(
        settings(
            **base,
            DB_SSLMODE="verify-ca",
            DB_SSLROOTCERT=str(certificates.ca),
            DB_SSLCERT=str(certificates.client_cert),
            DB_SSLKEY=str(certificates.client_key),
        )
    ).connect()
    conn.close()


def test_a_worker_runs_a_task_over_tls(tls_pg, certificates):
    import psycopg

    tls_dsn = f"{tls_pg.dsn} sslmode=verify-full sslrootcert={certificates.ca}"
    with psycopg.connect(tls_dsn, autocommit=True) as admin:
        queue = databases.create_queue(admin, tls_dsn)
    s = settings(
        DATABASE_URL=tls_dsn.replace("127.0.0.1", "localhost"),
        QUEUE_NAME=queue.name,
        QUEUE_TABLE=queue.table,
        QUEUE_WAIT_NOTIFY_INTERVAL="1",
    )
    running = InProcessWorker(function_worker(s, lambda payload, tarefa, conn: "ok")).start()
    try:
        with psycopg.connect(tls_dsn, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {queue.table} (origem, destino, processo, payload) "
                "VALUES ('t', 'w', 'p', 'x')"
            )
            wait_for(
                lambda: (
                    conn.execute(f"SELECT status FROM {queue.table}").fetchall() == [("sucesso",)]
                ),
                15,
                "the task to succeed over TLS",
            )
    finally:
        assert running.stop() == 0


def test_mysql_verify_full_connects_encrypted(tls_mariadb, certificates):
    url = f"{tls_mariadb.url}?ssl-mode=VERIFY_IDENTITY&ssl-ca={certificates.ca}"
    conn = make_driver(settings(DATABASE_URL=url.replace("127.0.0.1", "localhost"))).connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            [(_, cipher)] = cur.fetchall()
    finally:
        conn.close()
    assert cipher


def test_mysql_with_a_certificate_of_another_ca_is_refused_clearly(tls_mariadb, certificates):
    url = f"{tls_mariadb.url}?sslmode=verify-ca&sslrootcert={certificates.wrong_ca}"
    with pytest.raises(DatabaseAccessError) as refused:
        make_driver(settings(DATABASE_URL=url)).connect()
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
    assert "DB_SSLROOTCERT" in str(refused.value)


def test_mysql_sends_the_client_certificate(tls_mariadb, certificates):
    root = make_driver(settings(DATABASE_URL=tls_mariadb.url)).connect()
    try:
        with root.cursor() as cur:
            cur.execute("CREATE USER 'certuser'@'%' REQUIRE X509")
            cur.execute("GRANT ALL ON test.* TO 'certuser'@'%'")
    finally:
        root.close()
    url = tls_mariadb.url.replace("root:", "certuser:")
    with pytest.raises(DatabaseAccessError):
        make_driver(settings(DATABASE_URL=f"{url}?sslmode=require")).connect()
    conn = make_driver(
        settings(
            DATABASE_URL=f"{url}?sslmode=verify-ca&sslrootcert={certificates.ca}",
            DB_SSLCERT=str(certificates.client_cert),
            DB_SSLKEY=str(certificates.client_key),
        )
    ).connect()
    conn.close()
