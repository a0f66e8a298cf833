"""DATABASE_URL / DB_DSN, TLS variables, several hosts: read, checked, shown masked."""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.db.mysql.tls import ssl_options
from nsj_queue_lib.db.postgres.conninfo import conninfo
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.settings import Settings

QUEUE = {"QUEUE_NAME": "fila", "QUEUE_TABLE": "public.fila"}


def from_env(**variables: str) -> Settings:
    return Settings.from_env({**QUEUE, **variables})


def problems(**variables: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as raised:
        from_env(**variables)
    return raised.value.problems


def test_a_postgres_url_stands_for_the_db_variables():
    s = from_env(DATABASE_URL="postgresql://worker:s%40cret@db1:6432/app?sslmode=require")
    assert (s.db_driver, s.db_host, s.db_port, s.db_name, s.db_user, s.db_pass) == (
        "POSTGRES",
        "db1",
        6432,
        "app",
        "worker",
        "s@cret",
    )
    assert s.db_sslmode == "require"


def test_a_libpq_string_with_several_hosts_and_ports():
    s = from_env(DB_DSN="host=a,b port=5433,5432 dbname=app user=w target_session_attrs=read-write")
    assert (s.hosts(), s.db_port, s.db_target_session_attrs) == (
        ["a", "b"],
        (5433, 5432),
        "read-write",
    )
    libpq = conninfo(s)
    assert "host=a,b" in libpq and "port=5433,5432" in libpq
    assert "target_session_attrs=read-write" in libpq


def test_a_mysql_url_takes_tls_options_in_mysql_words(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    s = from_env(DATABASE_URL=f"mysql://root:pw@h:3307/test?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}")
    assert (s.db_driver, s.db_port, s.db_sslmode, s.db_sslrootcert) == (
        "MYSQL",
        3307,
        "verify-full",
        str(ca),
    )


def test_variables_that_agree_with_the_dsn_or_add_to_it_are_accepted():
    s = from_env(DATABASE_URL="postgresql://worker@db1/app", DB_HOST="db1", DB_PASS="secret")
    assert (s.db_host, s.db_pass) == ("db1", "secret")


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"DB_HOST": "other"}, "DB_HOST"),
        ({"DATABASE_HOST": "other"}, "DATABASE_HOST"),
        ({"DB_DRIVER": "MYSQL"}, "DB_DRIVER"),
        ({"DB_PASS": "different"}, "DB_PASS"),
        ({"DB_DSN": "postgresql://x@y/z"}, "DB_DSN"),
    ],
)
def test_a_dsn_contradicted_by_a_variable_is_a_config_error(variables, named):
    found = problems(DATABASE_URL="postgresql://worker:pw@db1/app", **variables)
    assert named in found
    assert "pw" not in str(found) and "different" not in str(found)


def test_an_unreadable_dsn_is_named_without_its_password():
    found = problems(DATABASE_URL="mysql://u:topsecret@h/d?nonsense=1")
    assert "DATABASE_URL" in found and "topsecret" not in found["DATABASE_URL"]


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"DB_PORT": "5433,x"}, "DB_PORT"),
        ({"DB_HOST": "a,b,c", "DB_PORT": "1,2"}, "DB_PORT"),
        ({"DB_PORT": "70000"}, "DB_PORT"),
        ({"DB_SSLMODE": "sometimes"}, "DB_SSLMODE"),
        ({"DB_SSLROOTCERT": "/no/such/ca.pem"}, "DB_SSLROOTCERT"),
        ({"DB_TARGET_SESSION_ATTRS": "writable"}, "DB_TARGET_SESSION_ATTRS"),
    ],
)
def test_bad_connection_variables_are_refused(variables, named):
    base = {"DB_HOST": "h", "DB_BASE": "d", "DB_USER": "u"}
    assert named in problems(**{**base, **variables})


def test_a_client_certificate_needs_its_key(tmp_path):
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    found = problems(DB_HOST="h", DB_BASE="d", DB_USER="u", DB_SSLCERT=str(cert))
    assert "DB_SSLKEY" in found


def test_the_masked_dsn_hides_the_password_and_shows_the_rest():
    s = from_env(DATABASE_URL="postgresql://w:hunter2@a,b:5433/app?sslmode=verify-full")
    shown = s.masked_dsn()
    assert "hunter2" not in shown and "hunter2" not in repr(s)
    assert shown == "postgresql://w:***@a:5432,b:5433/app?sslmode=verify-full"


def test_the_masked_dsn_shows_a_socket_directory_and_paths_plainly_in_a_url_libpq_reads(
    tmp_path,
):
    from psycopg.conninfo import conninfo_to_dict

    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    s = from_env(
        DB_HOST="/tmp/nsjq-pg-ab,db2",
        DB_PORT="5432,5433",
        DB_BASE="app",
        DB_USER="w",
        DB_PASS="hunter2",
        DB_SSLROOTCERT=str(ca),
    )
    shown = s.masked_dsn()
    assert shown == (
        f"postgresql://w:***@/app?host=/tmp/nsjq-pg-ab,db2&port=5432,5433&sslrootcert={ca}"
    )
    assert conninfo_to_dict(shown.replace(":***", "")) == {
        "user": "w",
        "dbname": "app",
        "host": "/tmp/nsjq-pg-ab,db2",
        "port": "5432,5433",
        "sslrootcert": str(ca),
    }


def test_mysql_refuses_several_hosts_and_target_session_attrs():
    s = from_env(
        DB_DRIVER="MYSQL", DB_HOST="a,b", DB_BASE="d", DB_USER="u", DB_TARGET_SESSION_ATTRS="any"
    )
    found = make_driver(s).check_settings()
    assert {"DB_HOST", "DB_TARGET_SESSION_ATTRS"} <= set(found)


@pytest.mark.parametrize(
    ("mode", "verified", "hostname"),
    [("require", False, False), ("verify-ca", True, False), ("verify-full", True, True)],
)
def test_mysql_tls_modes_become_pymysql_contexts(mode, verified, hostname):
    import ssl

    s = from_env(DB_DRIVER="MYSQL", DB_HOST="h", DB_BASE="d", DB_USER="u", DB_SSLMODE=mode)
    context = ssl_options(s)["ssl"]
    assert (context.verify_mode == ssl.CERT_REQUIRED, context.check_hostname) == (
        verified,
        hostname,
    )


def test_mysql_tls_disable_and_default():
    base = {"DB_DRIVER": "MYSQL", "DB_HOST": "h", "DB_BASE": "d", "DB_USER": "u"}
    assert ssl_options(from_env(**base, DB_SSLMODE="disable")) == {"ssl_disabled": True}
    assert ssl_options(from_env(**base)) == {}
