"""1.2.2 code keeps importing and subclassing: settings' module-level names, ``SubscriberWebhook``,
subclasses whose ``__init__`` does not call ``super().__init__()``."""

from __future__ import annotations

import logging
import warnings

import pytest

from nsj_queue_lib import settings as settings_module
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.worker_base import WorkerBase
from nsj_queue_lib.worker_pub_sub_base import Subscriber, SubscriberWebhook, WorkerPubSubBase
from tests.helpers.processes import python_report

SETTINGS = Settings(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q")


def test_1_2_2_names_resolve_with_a_deprecation_warning_reading_the_environment_then(monkeypatch):
    monkeypatch.setenv("QUEUE_TABLE", "public.fila")
    monkeypatch.setenv("DATABASE_PORT", "6543")
    monkeypatch.delenv("DB_PORT", raising=False)
    monkeypatch.setenv("LOG_DEBUG", "true")
    with pytest.warns(DeprecationWarning, match="nsj_queue_lib.settings.QUEUE_TABLE"):
        from nsj_queue_lib.settings import QUEUE_TABLE
    assert QUEUE_TABLE == "public.fila"
    with pytest.warns(DeprecationWarning):
        assert settings_module.DB_PORT == 6543  # 1.2.2's alias and type
        assert settings_module.LOG_DEBUG is True
        assert settings_module.QUEUE_MAX_RETRY == 100  # 1.2.2's default
        assert settings_module.END_MARK == "###END###"
    with pytest.warns(DeprecationWarning, match="logging.getLogger"):
        from nsj_queue_lib.settings import logger
    assert isinstance(logger, logging.Logger) and logger.name.startswith("nsj_queue_lib")


def test_unknown_names_still_fail_to_import():
    with pytest.raises(ImportError):
        from nsj_queue_lib.settings import NOT_A_SETTING  # noqa: F401


def test_importing_settings_reads_no_environment_even_for_1_2_2_code():
    # 1.2.2's example, in an empty environment: 1.2.2 itself failed at import here.
    script = (
        "import json, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from nsj_queue_lib.settings import logger, QUEUE_TABLE, DB_PORT\n"
        "from nsj_queue_lib.worker_pub_sub_base import WorkerPubSubBase, Subscriber, "
        "DeadSubscriber, SubscriberWebhook\n"
        "print(json.dumps([logger.name, QUEUE_TABLE, DB_PORT]))\n"
    )
    import os

    assert python_report(f"exec({script!r})", {"PATH": os.environ.get("PATH", "")}) == [
        "nsj_queue_lib.app",
        None,
        None,
    ]


class NoSuperWorker(WorkerBase):
    def __init__(self):  # 1.2.2 style: no super().__init__()
        self.seen = []

    def execute(self, payload, tarefa, bd_conn):
        self.seen.append(payload)
        return "ok"


@SubscriberWebhook("hook")
class NoSuperPubSub(WorkerPubSubBase):
    def __init__(self):
        pass

    @Subscriber("s1")
    def on_s1(self, payload, subscription, tarefa, bd_conn):
        return f"s1 {payload['publication']}"


def test_a_subclass_without_super_init_handles_tasks():
    worker = NoSuperWorker()
    assert worker.handle_task({"id": 1, "payload": "p"}, None) == "ok"
    worker.stop()  # no runtime yet: nothing to stop, no AttributeError
    assert worker.seen == ["p"]
    envelope = '{"publication": "x", "subscription": {"id": "s1"}}'
    assert NoSuperPubSub().handle_task({"id": 2, "payload": envelope}, None) == "s1 x"


def test_a_subclass_without_super_init_reads_its_settings_at_run(monkeypatch):
    for name in ("DB_HOST", "DATABASE_HOST"):
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Settings come from the environment at run: a missing DB_HOST is a config error.
        assert NoSuperWorker().run_until_stopped(install_signal_handlers=False) == 2


def test_queue_compat_1_2_2_takes_auto_on_off_in_any_case():
    assert (
        Settings.from_env(
            {"DB_HOST": "h", "DB_BASE": "d", "DB_USER": "u", "QUEUE_NAME": "q", "QUEUE_TABLE": "q"}
        ).queue_compat_1_2_2
        == "AUTO"
    )
    assert SETTINGS.with_changes(queue_compat_1_2_2="off").queue_compat_1_2_2 == "OFF"
    with pytest.raises(Exception, match="QUEUE_COMPAT_1_2_2"):
        SETTINGS.with_changes(queue_compat_1_2_2="sometimes")
