"""The ``nsjq`` command's parts that need no database: configuration, DSNs, tables, stores."""

from __future__ import annotations

import argparse
import datetime
import inspect

import pytest

from nsj_queue_lib.cli import app
from nsj_queue_lib.cli.config import load
from nsj_queue_lib.cli.errors import UsageError
from nsj_queue_lib.cli.inspect_commands import parse_time
from nsj_queue_lib.cli.output import duration, table
from nsj_queue_lib.db.driver import driver_class
from nsj_queue_lib.db.dsn import dsn_environment
from nsj_queue_lib.db.inspection import TaskFilter, as_utc
from nsj_queue_lib.db.queue_store import InspectionStore

UTC = datetime.timezone.utc


def test_the_command_reads_only_the_variables_it_uses():
    environ = {
        "DATABASE_HOST": "db",
        "DB_BASE": "app",
        "DB_USER": "ops",
        "QUEUE_TABLE": "public.fila",
        # Malformed, but nothing the command uses: never checked.
        "QUEUE_NAME": "not an identifier",
        "QUEUE_CONCURRENCY": "many",
        "QUEUE_GRACE_PERIOD": "forever",
    }
    config = load(environ)
    settings = config.database_settings()
    assert (settings.db_host, settings.db_name, settings.db_user) == ("db", "app", "ops")
    assert config.queue_table == "public.fila" and config.dialect == "postgres"
    assert load(environ, table="other.q").queue_table == "other.q"


def test_the_dsn_replaces_every_database_variable():
    environ = {"DB_HOST": "elsewhere", "DB_PASS": "old", "DB_DRIVER": "POSTGRES"}
    config = load(environ, dsn="mysql://u:p%40ss@h:3307/app", table="app.q")
    settings = config.database_settings()
    assert config.dialect == "mysql"
    assert (settings.db_host, settings.db_port, settings.db_name) == ("h", 3307, "app")
    assert (settings.db_user, settings.db_pass) == ("u", "p@ss")


def test_the_command_reads_database_url_and_the_tls_variables_as_workers_do():
    environ = {
        "DATABASE_URL": "postgresql://ops@db1,db2/app?target_session_attrs=read-write",
        "DB_SSLMODE": "require",
        "QUEUE_TABLE": "public.fila",
    }
    settings = load(environ).database_settings()
    assert (settings.hosts(), settings.db_name, settings.db_sslmode) == (
        ["db1", "db2"],
        "app",
        "require",
    )
    assert settings.db_target_session_attrs == "read-write"


def test_printing_the_ddl_needs_no_database_settings():
    config = load({"DB_DRIVER": "SINGLE_STORE"}, table="s.q", database=False)
    assert (config.dialect, config.settings) == ("singlestore", None)
    assert load({}, table="s.q", database=False, dialect="mysql").dialect == "mysql"
    with pytest.raises(UsageError, match="DB_DRIVER"):
        load({"DB_DRIVER": "ORACLE"}, table="s.q", database=False)


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        (
            "host=h port=5433 user=u password=secret dbname=d",
            {
                "DB_HOST": "h",
                "DB_PORT": "5433",
                "DB_USER": "u",
                "DB_PASS": "secret",
                "DB_BASE": "d",
            },
        ),
        (
            "postgresql://u@h/d",
            {"DB_HOST": "h", "DB_USER": "u", "DB_PASS": "", "DB_BASE": "d"},
        ),
        ("host=h user=u", {"DB_HOST": "h", "DB_USER": "u", "DB_PASS": "", "DB_BASE": "u"}),
        (
            "mariadb://root:@127.0.0.1:3306/test",
            {
                "DB_DRIVER": "MYSQL",
                "DB_HOST": "127.0.0.1",
                "DB_PORT": "3306",
                "DB_USER": "root",
                "DB_PASS": "",
                "DB_BASE": "test",
            },
        ),
        ("singlestore://a:b@h/d", {"DB_DRIVER": "SINGLE_STORE", "DB_HOST": "h", "DB_BASE": "d"}),
    ],
)
def test_dsn_environment(dsn, expected):
    found = dsn_environment(dsn)
    assert {k: found[k] for k in expected} == expected
    if "DB_DRIVER" not in expected:
        assert found["DB_DRIVER"] == "POSTGRES"


@pytest.mark.parametrize(
    "dsn",
    [
        "mysql://u:secret@h/",
        "mysql://u:secret@h:99999/d",
        "mysql://u:secret@h/d?ssl=1",
        "mysql://u:secret@h/d?sslmode",
        "host=h user=u password=secret application_name=x",
        "password=secret",
        "postgresql://u:secret@h/d?application_name=x",
    ],
)
def test_a_bad_dsn_is_refused_without_repeating_its_password(dsn):
    with pytest.raises(ValueError) as raised:
        dsn_environment(dsn)
    assert "secret" not in str(raised.value)


def test_table_aligns_columns_and_right_aligns_numbers():
    rows = [["a", 5, None, None], ["longer", 12345, True, None]]
    assert table(["name", "count", "when", "empty"], rows).splitlines() == [
        "NAME    COUNT  WHEN  EMPTY",
        "a           5  -     -",
        "longer  12345  yes   -",
    ]
    moment = datetime.datetime(
        2024, 5, 1, 9, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=-3))
    )
    assert table(["at"], [[moment]]).splitlines()[1] == "2024-05-01T12:00:00Z"
    assert table(["m"], [["two\nlines"]]).splitlines()[1] == "two lines"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, None),
        (0.4, "0s"),
        (59, "59s"),
        (65, "1m05s"),
        (3 * 3600 + 120, "3h02m"),
        (90000, "1d01h"),
    ],
)
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_parse_time():
    assert parse_time("2024-05-01T12:00") == datetime.datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert parse_time("2024-05-01T12:00:00Z") == datetime.datetime(2024, 5, 1, 12, tzinfo=UTC)
    parsed = parse_time("2h")
    ago = datetime.datetime.now(UTC) - parsed
    assert datetime.timedelta(hours=2) <= ago < datetime.timedelta(hours=2, seconds=5)


def test_times_leave_the_stores_in_utc():
    assert as_utc(1714564800.5) == datetime.datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=UTC)
    assert as_utc(None) is None
    with pytest.raises(ValueError, match="aware"):
        TaskFilter(since=datetime.datetime(2024, 5, 1)).parameters()


def _operations(protocol: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(protocol).items()
        if not name.startswith("_") and callable(member)
    }


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "singlestore"])
def test_each_dialect_has_an_inspection_store(dialect):
    store = driver_class(dialect).new_inspection_store("s.q")
    assert store.queue_table == "s.q"
    for name, expected in _operations(InspectionStore).items():
        actual = inspect.signature(getattr(store, name))
        assert list(actual.parameters) == list(expected.parameters)[1:], name


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["status"], "status"),
        (["--dsn", "show", "--table", "s.q", "status", "--json"], "status"),
        (["--dsn=postgresql://h/d", "--json", "show", "7"], "show"),
        (["status", "--help"], None),  # help lists every command's
        (["-h"], None),
        (["--version"], None),
        (["stat"], None),  # the full parser says which commands there are
        ([], None),
    ],
)
def test_a_run_builds_the_parser_of_its_command_alone(argv, named):
    assert app._named_command(argv) == named
    parser = app.build_parser(argv)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    expected = list(app._COMMANDS) if named is None else [named]
    assert list(commands.choices) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--limit", "5", "--json"],
        ["--table", "s.q", "tasks", "--status", "falha", "--page", "2"],
        ["pause", "fiscal", "--until", "2h"],
        ["breaker", "reset", "fiscal", "--subscriber"],
        ["upgrade", "--dialect", "postgres", "--layout", "partitioned"],
        ["health", "--live"],
    ],
)
def test_a_commands_own_parser_reads_its_arguments_as_the_full_one(argv):
    alone = vars(app.build_parser(argv).parse_args(argv))
    full = vars(app.build_parser(["--help"]).parse_args(argv))  # every command's parser
    for parsed in (alone, full):
        parsed.pop("until", None)  # pause's: from now, a moment apart
    assert alone == full
