"""Settings.from_env: every variable of CONTRACT section 5, its default, and the errors."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.settings import Settings

EVERY_FIVE = (0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55)

# The smallest valid environment: what has no default.
MINIMAL = {
    "DB_HOST": "db.example",
    "DB_BASE": "erp",
    "DB_USER": "app",
    "QUEUE_NAME": "fila_teste",
    "QUEUE_TABLE": "public.fila_teste",
}

# Defaults of the specification's tables and of CONTRACT section 5.
DEFAULTS = {
    "db_pass": "",
    "db_port": 5432,
    "db_driver": "POSTGRES",
    "queue_subscriber_table": None,
    "log_debug": False,
    "queue_max_retry": 100,
    "queue_base_interval_retry": 5,
    "queue_minute_retry_thread": EVERY_FIVE,
    "queue_minute_purge_thread": (0,),
    "queue_minute_notify_thread": EVERY_FIVE,
    "queue_purge_max_age": 60,
    "queue_purge_limit": 1000,
    "queue_wait_notify_interval": 30,
    "default_webhook_timeout": 20,
    "env": "DEV",
    "grafana_url": None,
    "client_server_mode": False,
    "server_host": "127.0.0.1",
    "notify_service_port": 8770,
    "lock_service_port": 8970,
    "timeout_socket_message": 5,
    "max_client_threads": 50,
    "check_tasks_interval": 15,
    "lock_service_wait_conn_interval": 30,
    "queue_concurrency": 1,
    "queue_retry_thread_interval": None,
    "queue_purge_thread_interval": None,
    "queue_notify_thread_interval": None,
    "queue_server_token": None,
    "queue_metrics_port": None,
    "queue_metrics_depth_interval": 15,
    "queue_wakeup": None,
}

# variable -> (value to set, field, expected value): every variable is read.
EXPLICIT = {
    "DB_HOST": ("pg.internal", "db_host", "pg.internal"),
    "QUEUE_METRICS_PORT": ("9100", "queue_metrics_port", 9100),
    "QUEUE_METRICS_DEPTH_INTERVAL": ("2.5", "queue_metrics_depth_interval", 2.5),
    "QUEUE_WAKEUP": ("Poll", "queue_wakeup", "poll"),
    "DB_PORT": ("6543", "db_port", 6543),
    "DB_BASE": ("other", "db_name", "other"),
    "DB_USER": ("someone", "db_user", "someone"),
    "DB_PASS": ("s3cret", "db_pass", "s3cret"),
    "DB_DRIVER": ("MYSQL", "db_driver", "MYSQL"),
    "QUEUE_NAME": ("other_queue", "queue_name", "other_queue"),
    "QUEUE_TABLE": ("fila", "queue_table", "fila"),
    "QUEUE_SUBSCRIBER_TABLE": ("public.fila_sub", "queue_subscriber_table", "public.fila_sub"),
    "LOG_DEBUG": ("true", "log_debug", True),
    "QUEUE_MAX_RETRY": ("7", "queue_max_retry", 7),
    "QUEUE_BASE_INTERVAL_RETRY": ("3", "queue_base_interval_retry", 3),
    "QUEUE_MINUTE_RETRY_THREAD": ("1,2", "queue_minute_retry_thread", (1, 2)),
    "QUEUE_MINUTE_PURGE_THREAD": ("30", "queue_minute_purge_thread", (30,)),
    "QUEUE_MINUTE_NOTIFY_THREAD": ("59,0", "queue_minute_notify_thread", (0, 59)),
    "QUEUE_PURGE_MAX_AGE": ("10", "queue_purge_max_age", 10),
    "QUEUE_PURGE_LIMIT": ("500", "queue_purge_limit", 500),
    "QUEUE_WAIT_NOTIFY_INTERVAL": ("12", "queue_wait_notify_interval", 12),
    "DEFAULT_WEBHOOK_TIMEOUT": ("3", "default_webhook_timeout", 3),
    "ENV": ("prod", "env", "PROD"),
    "GRAFANA_URL": ("http://loki:3100", "grafana_url", "http://loki:3100"),
    "CLIENT_SERVER_MODE": ("True", "client_server_mode", True),
    "SERVER_HOST": ("10.0.0.5", "server_host", "10.0.0.5"),
    "NOTIFY_SERVICE_PORT": ("9000", "notify_service_port", 9000),
    "LOCK_SERVICE_PORT": ("9001", "lock_service_port", 9001),
    "TIMEOUT_SOCKET_MESSAGE": ("9", "timeout_socket_message", 9),
    "MAX_CLIENT_THREADS": ("4", "max_client_threads", 4),
    "CHECK_TASKS_INTERVAL": ("2", "check_tasks_interval", 2),
    "LOCK_SERVICE_WAIT_CONN_INTERVAL": ("8", "lock_service_wait_conn_interval", 8),
    "QUEUE_CONCURRENCY": ("16", "queue_concurrency", 16),
    "QUEUE_RETRY_THREAD_INTERVAL": ("2.5", "queue_retry_thread_interval", 2.5),
    "QUEUE_PURGE_THREAD_INTERVAL": ("60", "queue_purge_thread_interval", 60),
    "QUEUE_NOTIFY_THREAD_INTERVAL": ("0.25", "queue_notify_thread_interval", 0.25),
    "QUEUE_SERVER_TOKEN": ("tok-123", "queue_server_token", "tok-123"),
    "QUEUE_SYNCHRONOUS_COMMIT": ("off", "queue_synchronous_commit", False),
}

ALIASES = {
    "DB_HOST": ("DATABASE_HOST", "db_host", "alias.host", "alias.host"),
    "DB_PORT": ("DATABASE_PORT", "db_port", "7777", 7777),
    "DB_BASE": ("DATABASE_NAME", "db_name", "alias_db", "alias_db"),
    "DB_USER": ("DATABASE_USER", "db_user", "alias_user", "alias_user"),
    "DB_PASS": ("DATABASE_PASS", "db_pass", "alias_pass", "alias_pass"),
}


def env(**changes: str) -> dict[str, str]:
    values = dict(MINIMAL)
    values.update(changes)
    return values


def config_error(environ) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        Settings.from_env(environ)
    return info.value


def test_minimal_environment_gives_every_default():
    settings = Settings.from_env(MINIMAL)
    assert settings.db_host == "db.example"
    assert settings.db_name == "erp"
    assert settings.db_user == "app"
    assert settings.queue_name == "fila_teste"
    assert settings.queue_table == "public.fila_teste"
    for field, expected in DEFAULTS.items():
        assert getattr(settings, field) == expected, field


@pytest.mark.parametrize("variable", sorted(EXPLICIT))
def test_every_variable_is_read(variable):
    value, field, expected = EXPLICIT[variable]
    settings = Settings.from_env(env(**{variable: value}))
    assert getattr(settings, field) == expected
    assert expected != DEFAULTS.get(field, object()), "the value must differ from the default"


def test_every_contract_variable_is_covered():
    contract = {
        "DB_HOST",
        "DB_PORT",
        "DB_BASE",
        "DB_USER",
        "DB_PASS",
        "DB_DRIVER",
        "QUEUE_NAME",
        "QUEUE_TABLE",
        "QUEUE_SUBSCRIBER_TABLE",
        "LOG_DEBUG",
        "QUEUE_MAX_RETRY",
        "QUEUE_BASE_INTERVAL_RETRY",
        "QUEUE_MINUTE_RETRY_THREAD",
        "QUEUE_MINUTE_PURGE_THREAD",
        "QUEUE_MINUTE_NOTIFY_THREAD",
        "QUEUE_PURGE_MAX_AGE",
        "QUEUE_PURGE_LIMIT",
        "QUEUE_WAIT_NOTIFY_INTERVAL",
        "DEFAULT_WEBHOOK_TIMEOUT",
        "ENV",
        "GRAFANA_URL",
        "CLIENT_SERVER_MODE",
        "SERVER_HOST",
        "NOTIFY_SERVICE_PORT",
        "LOCK_SERVICE_PORT",
        "TIMEOUT_SOCKET_MESSAGE",
        "MAX_CLIENT_THREADS",
        "CHECK_TASKS_INTERVAL",
        "LOCK_SERVICE_WAIT_CONN_INTERVAL",
        "QUEUE_CONCURRENCY",
        "QUEUE_RETRY_THREAD_INTERVAL",
        "QUEUE_PURGE_THREAD_INTERVAL",
        "QUEUE_NOTIFY_THREAD_INTERVAL",
        "QUEUE_SERVER_TOKEN",
    }
    assert contract <= set(EXPLICIT)


@pytest.mark.parametrize("primary", sorted(ALIASES))
def test_database_aliases(primary):
    alias, field, value, expected = ALIASES[primary]
    environ = {k: v for k, v in MINIMAL.items() if k != primary}
    environ[alias] = value
    assert getattr(Settings.from_env(environ), field) == expected


def test_db_variable_wins_over_its_alias():
    settings = Settings.from_env(env(DB_HOST="primary", DATABASE_HOST="alias"))
    assert settings.db_host == "primary"


def test_empty_value_counts_as_unset_and_falls_back_to_the_alias():
    settings = Settings.from_env(env(DB_HOST="", DATABASE_HOST="alias.host"))
    assert settings.db_host == "alias.host"


@pytest.mark.parametrize("blank", ["", "   "])
def test_empty_values_count_as_unset(blank):
    settings = Settings.from_env(
        env(
            QUEUE_MAX_RETRY=blank,
            DB_PORT=blank,
            ENV=blank,
            QUEUE_SUBSCRIBER_TABLE=blank,
            GRAFANA_URL=blank,
            QUEUE_CONCURRENCY=blank,
            QUEUE_MINUTE_PURGE_THREAD=blank,
        )
    )
    assert settings.queue_max_retry == 100
    assert settings.db_port == 5432
    assert settings.env == "DEV"
    assert settings.queue_subscriber_table is None
    assert settings.grafana_url is None
    assert settings.queue_concurrency == 1
    assert settings.queue_minute_purge_thread == (0,)


@pytest.mark.parametrize("required", sorted(MINIMAL))
def test_required_variable_missing_or_empty(required):
    for environ in ({k: v for k, v in MINIMAL.items() if k != required}, env(**{required: ""})):
        error = config_error(environ)
        assert required in error.problems
        assert required in str(error)


def test_config_error_lists_every_bad_variable_at_once():
    environ = {
        "DB_BASE": "erp",
        "QUEUE_TABLE": "fila; drop table x",
        "DB_PORT": "abc",
        "DB_DRIVER": "ORACLE",
        "QUEUE_MAX_RETRY": "0",
        "QUEUE_BASE_INTERVAL_RETRY": "soon",
        "QUEUE_MINUTE_RETRY_THREAD": "0,61",
        "QUEUE_CONCURRENCY": "0",
        "LOG_DEBUG": "maybe",
        "NOTIFY_SERVICE_PORT": "70000",
        "QUEUE_RETRY_THREAD_INTERVAL": "-1",
    }
    error = config_error(environ)
    expected = {
        "DB_HOST",
        "DB_USER",
        "QUEUE_NAME",
        "QUEUE_TABLE",
        "DB_PORT",
        "DB_DRIVER",
        "QUEUE_MAX_RETRY",
        "QUEUE_BASE_INTERVAL_RETRY",
        "QUEUE_MINUTE_RETRY_THREAD",
        "QUEUE_CONCURRENCY",
        "LOG_DEBUG",
        "NOTIFY_SERVICE_PORT",
        "QUEUE_RETRY_THREAD_INTERVAL",
    }
    assert set(error.problems) == expected
    for name in expected:
        assert name in str(error)
    assert isinstance(error, ValueError)


def test_bad_alias_is_reported_under_the_name_that_was_set():
    error = config_error(env(DB_PORT="", DATABASE_PORT="x"))
    assert "DATABASE_PORT" in error.problems


@pytest.mark.parametrize(
    "value, expected",
    [
        ("0,5,10", (0, 5, 10)),
        (" 10 , 5 ,0 ", (0, 5, 10)),
        ("5,5", (5,)),
        ("59", (59,)),
        ("0", (0,)),
    ],
)
def test_minutes_lists(value, expected):
    assert (
        Settings.from_env(env(QUEUE_MINUTE_RETRY_THREAD=value)).queue_minute_retry_thread
        == expected
    )


@pytest.mark.parametrize("value", ["60", "-1", "a", "1,,2", "1;2", "0,5,", "1.5", "5 10"])
def test_bad_minutes_lists(value):
    for variable in (
        "QUEUE_MINUTE_RETRY_THREAD",
        "QUEUE_MINUTE_PURGE_THREAD",
        "QUEUE_MINUTE_NOTIFY_THREAD",
    ):
        assert variable in config_error(env(**{variable: value})).problems


@pytest.mark.parametrize(
    "value, expected", [("0.5", 0.5), ("0.1", 0.1), ("2.25", 2.25), ("5", 5.0)]
)
def test_base_interval_retry_accepts_fractions_of_a_minute(value, expected):
    settings = Settings.from_env(env(QUEUE_BASE_INTERVAL_RETRY=value))
    assert settings.queue_base_interval_retry == pytest.approx(expected)


@pytest.mark.parametrize("value", ["-1", "abc", "nan", "inf", "1e999", "1,5"])
def test_bad_base_interval_retry(value):
    assert (
        "QUEUE_BASE_INTERVAL_RETRY" in config_error(env(QUEUE_BASE_INTERVAL_RETRY=value)).problems
    )


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "many", "2.0"])
def test_concurrency_must_be_an_integer_of_at_least_one(value):
    assert "QUEUE_CONCURRENCY" in config_error(env(QUEUE_CONCURRENCY=value)).problems


@pytest.mark.parametrize("value", ["0", "65536", "-1", "http", "91.5"])
def test_a_bad_metrics_port_is_named(value):
    assert "QUEUE_METRICS_PORT" in config_error(env(QUEUE_METRICS_PORT=value)).problems


def test_concurrency_accepts_one_and_more():
    assert Settings.from_env(env(QUEUE_CONCURRENCY="1")).queue_concurrency == 1
    assert Settings.from_env(env(QUEUE_CONCURRENCY=" 32 ")).queue_concurrency == 32


@pytest.mark.parametrize(
    "driver, port", [("POSTGRES", 5432), ("MYSQL", 3306), ("SINGLE_STORE", 3306), ("mysql", 3306)]
)
def test_drivers_and_their_default_ports(driver, port):
    settings = Settings.from_env(env(DB_DRIVER=driver))
    assert settings.db_driver == driver.upper()
    assert settings.db_port == port


@pytest.mark.parametrize("driver", ["ORACLE", "postgresql", "sqlite", "MY SQL"])
def test_unknown_driver(driver):
    error = config_error(env(DB_DRIVER=driver))
    assert "DB_DRIVER" in error.problems
    assert driver in str(error)


@pytest.mark.parametrize(
    "value, expected",
    [("true", True), ("TRUE", True), ("1", True), ("false", False), ("False", False), ("0", False)],
)
def test_booleans(value, expected):
    settings = Settings.from_env(env(LOG_DEBUG=value, CLIENT_SERVER_MODE=value))
    assert settings.log_debug is expected
    assert settings.client_server_mode is expected


@pytest.mark.parametrize(
    "variable, value",
    [
        ("QUEUE_NAME", "fila-teste"),
        ("QUEUE_NAME", "public.fila"),
        ("QUEUE_TABLE", "a.b.c"),
        ("QUEUE_TABLE", 'public."fila"'),
        ("QUEUE_SUBSCRIBER_TABLE", "sub scriber"),
        ("DB_PORT", "0"),
        ("DB_PORT", "65536"),
        ("QUEUE_PURGE_LIMIT", "0"),
        ("QUEUE_PURGE_MAX_AGE", "-1"),
        ("QUEUE_WAIT_NOTIFY_INTERVAL", "0"),
        ("DEFAULT_WEBHOOK_TIMEOUT", "-5"),
        ("MAX_CLIENT_THREADS", "0"),
        ("LOCK_SERVICE_PORT", "http"),
        ("QUEUE_PURGE_THREAD_INTERVAL", "0"),
        ("QUEUE_NOTIFY_THREAD_INTERVAL", "x"),
    ],
)
def test_malformed_values_are_named(variable, value):
    assert variable in config_error(env(**{variable: value})).problems


def test_settings_are_frozen_and_copyable():
    settings = Settings.from_env(MINIMAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.queue_concurrency = 4  # type: ignore[misc]
    changed = settings.with_changes(queue_concurrency=4)
    assert changed.queue_concurrency == 4
    assert settings.queue_concurrency == 1


def test_server_token_is_not_in_repr():
    settings = Settings.from_env(env(QUEUE_SERVER_TOKEN="very-secret-token"))
    assert "very-secret-token" not in repr(settings)


def test_from_env_does_not_touch_os_environ(monkeypatch):
    monkeypatch.setenv("DB_HOST", "from-os-environ")
    assert Settings.from_env(env(DB_HOST="given")).db_host == "given"
    with pytest.raises(ConfigError):
        Settings.from_env({})


def test_settings_can_be_built_in_code():
    from nsj_queue_lib.db.driver import make_driver

    settings = Settings(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q")
    assert settings.queue_max_retry == 100
    assert "host=h" in make_driver(settings).conninfo()


def test_asynchronous_commits_are_postgresql_only():
    """from_env reads QUEUE_SYNCHRONOUS_COMMIT for every database; the driver, which knows
    what its database offers, refuses false outside PostgreSQL (the worker exits 2 on it)."""
    from nsj_queue_lib.db.driver import make_driver

    assert Settings.from_env(env()).queue_synchronous_commit is True
    postgres = Settings.from_env(env(QUEUE_SYNCHRONOUS_COMMIT="false"))
    assert postgres.queue_synchronous_commit is False
    assert make_driver(postgres).check_settings() == {}
    for driver in ("MYSQL", "SINGLE_STORE"):
        settings = Settings.from_env(
            env(DB_DRIVER=driver, QUEUE_SYNCHRONOUS_COMMIT="off", CLIENT_SERVER_MODE="true")
        )
        problems = make_driver(settings).check_settings()
        assert set(problems) == {"QUEUE_SYNCHRONOUS_COMMIT"}
        assert "PostgreSQL only" in problems["QUEUE_SYNCHRONOUS_COMMIT"]
    assert Settings.from_env(
        env(DB_DRIVER="MYSQL", QUEUE_SYNCHRONOUS_COMMIT="on")
    ).queue_synchronous_commit


# -- settings built in code: the same checks -------------------------------------------

IN_CODE = dict(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q")


@pytest.mark.parametrize(
    "field, value, variable",
    [
        ("db_host", "", "DB_HOST"),
        ("db_user", "  ", "DB_USER"),
        ("db_port", 70000, "DB_PORT"),
        ("db_port", "5432", "DB_PORT"),
        ("db_driver", "ORACLE", "DB_DRIVER"),
        ("queue_name", "fila teste", "QUEUE_NAME"),
        ("queue_table", "fila; drop table x", "QUEUE_TABLE"),
        ("queue_subscriber_table", "a.b.c", "QUEUE_SUBSCRIBER_TABLE"),
        ("queue_max_retry", 0, "QUEUE_MAX_RETRY"),
        ("queue_base_interval_retry", -1, "QUEUE_BASE_INTERVAL_RETRY"),
        ("queue_base_interval_retry", float("nan"), "QUEUE_BASE_INTERVAL_RETRY"),
        ("queue_concurrency", 0, "QUEUE_CONCURRENCY"),
        ("queue_concurrency", 1.5, "QUEUE_CONCURRENCY"),
        ("queue_concurrency", True, "QUEUE_CONCURRENCY"),
        ("queue_grace_period", -1, "QUEUE_GRACE_PERIOD"),
        ("queue_poll_interval", 0, "QUEUE_POLL_INTERVAL"),
        ("queue_minute_retry_thread", (0, 61), "QUEUE_MINUTE_RETRY_THREAD"),
        ("queue_retry_thread_interval", -1.0, "QUEUE_RETRY_THREAD_INTERVAL"),
        ("queue_purge_limit", 0, "QUEUE_PURGE_LIMIT"),
        ("notify_service_port", 0, "NOTIFY_SERVICE_PORT"),
        ("timeout_socket_message", float("inf"), "TIMEOUT_SOCKET_MESSAGE"),
        ("log_format", "xml", "LOG_FORMAT"),
        ("queue_metrics_port", 0, "QUEUE_METRICS_PORT"),
        ("queue_metrics_port", 9100.5, "QUEUE_METRICS_PORT"),
        ("queue_metrics_port", "9100", "QUEUE_METRICS_PORT"),
        ("queue_metrics_depth_interval", 0, "QUEUE_METRICS_DEPTH_INTERVAL"),
    ],
)
def test_settings_built_in_code_are_checked_like_the_environment(field, value, variable):
    with pytest.raises(ConfigError) as info:
        Settings(**{**IN_CODE, field: value})
    assert set(info.value.problems) == {variable}
    valid = Settings(**IN_CODE)
    with pytest.raises(ConfigError) as changed:
        valid.with_changes(**{field: value})
    assert changed.value.problems == info.value.problems


@pytest.mark.parametrize(
    "field, value, variable, text",
    [
        ("queue_concurrency", 0, "QUEUE_CONCURRENCY", "0"),
        ("queue_max_retry", 0, "QUEUE_MAX_RETRY", "0"),
        ("db_port", 70000, "DB_PORT", "70000"),
        ("queue_purge_max_age", -1, "QUEUE_PURGE_MAX_AGE", "-1"),
        ("db_driver", "ORACLE", "DB_DRIVER", "ORACLE"),
        ("queue_table", "fila; drop table x", "QUEUE_TABLE", "fila; drop table x"),
    ],
)
def test_code_and_environment_give_the_same_message(field, value, variable, text):
    with pytest.raises(ConfigError) as in_code:
        Settings(**{**IN_CODE, field: value})
    assert in_code.value.problems == config_error(env(**{variable: text})).problems


def test_every_problem_of_settings_built_in_code_at_once():
    with pytest.raises(ConfigError) as info:
        Settings(**{**IN_CODE, "queue_concurrency": 0, "db_port": 0, "queue_table": "x y"})
    assert set(info.value.problems) == {"QUEUE_CONCURRENCY", "DB_PORT", "QUEUE_TABLE"}


def test_log_format():
    assert Settings.from_env(env()).log_format == "text"
    assert Settings.from_env(env(LOG_FORMAT="JSON")).log_format == "json"
    assert "LOG_FORMAT" in config_error(env(LOG_FORMAT="yaml")).problems


@pytest.mark.parametrize(
    "wakeup, server_mode, problem",
    [
        ("listen", "false", None),
        ("poll", "true", None),
        ("server", "true", None),
        ("server", "false", "only with CLIENT_SERVER_MODE=true"),
        ("listen", "true", "the socket server listens"),
        ("push", "false", "must be one of"),
    ],
)
def test_queue_wakeup_agrees_with_client_server_mode(wakeup, server_mode, problem):
    environ = env(QUEUE_WAKEUP=wakeup, CLIENT_SERVER_MODE=server_mode)
    if problem is None:
        assert Settings.from_env(environ).queue_wakeup == wakeup
        return
    error = config_error(environ)
    assert set(error.problems) == {"QUEUE_WAKEUP"}
    assert problem in error.problems["QUEUE_WAKEUP"]
    with pytest.raises(ConfigError):  # settings built in code are checked the same way
        Settings(
            **{
                **dataclasses.asdict(Settings.from_env(MINIMAL)),
                "queue_wakeup": wakeup,
                "client_server_mode": server_mode == "true",
            }
        )


def test_reading_settings_loads_no_database_driver():
    """The settings and their checks are import-cheap: no psycopg, no PyMySQL."""
    script = (
        "import sys\n"
        "from nsj_queue_lib.settings import Settings\n"
        "for driver in ('POSTGRES', 'MYSQL', 'SINGLE_STORE'):\n"
        f"    Settings.from_env(dict({MINIMAL!r}, DB_DRIVER=driver, QUEUE_BATCH_SIZE='5'))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('psycopg', 'psycopg2', 'psycopg_pool', 'pymysql', 'MySQLdb')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
