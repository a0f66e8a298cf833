"""``WORKERS_JSON`` (nsj_queue_lib/workers_json.py): several queues for one process.

Checked at start-up, before anything runs: every problem is named by its
entry and key, and ``python -m nsj_queue_lib.workers_json`` exits with code 2.
The running group (two queues, SIGTERM) is tested with a real process in
tests/contract/test_workers_json_process.py.
"""

from __future__ import annotations

import json

import pytest

from nsj_queue_lib import WorkerBase
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.workers_json import main, workers_from_env

BASE = {
    "DB_HOST": "127.0.0.1",
    "DB_BASE": "test",
    "DB_USER": "u",
    "QUEUE_NAME": "ignored",
    "QUEUE_TABLE": "public.ignored",
    "QUEUE_SUBSCRIBER_TABLE": "public.ignored_subscriber",
    "QUEUE_CONCURRENCY": "3",
    "QUEUE_MAX_RETRY": "7",
}
HERE = "tests.unit.test_workers_json"


class Billing(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        return "billed"


class Mail(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        return "sent"


class NeedsMore(WorkerBase):
    def __init__(self, settings, extra):
        super().__init__(settings)


class NotAWorker:
    pass


def problems(entries) -> dict[str, str]:
    text = entries if isinstance(entries, str) else json.dumps(entries)
    with pytest.raises(ConfigError) as caught:
        workers_from_env({**BASE, "WORKERS_JSON": text})
    return caught.value.problems


def test_each_entry_builds_its_worker_with_its_own_queue_settings():
    billing, mail = workers_from_env(
        {
            **BASE,
            "WORKERS_JSON": json.dumps(
                [
                    {"queue": "public.fila_a", "worker": f"{HERE}:Billing", "concurrency": 2},
                    {
                        "queue": "fila_b",
                        "name": "mail_channel",
                        "worker": f"{HERE}:Mail",
                        "subscriber_table": "fila_b_subscriber",
                        "env": {"QUEUE_MAX_RETRY": 5, "QUEUE_TASK_TIMEOUT": 1.5},
                    },
                ]
            ),
        }
    )
    assert type(billing).__name__ == "Billing" and type(mail).__name__ == "Mail"
    a, b = billing._settings, mail._settings
    assert (a.queue_table, a.queue_name, a.queue_subscriber_table) == (
        "public.fila_a",
        "fila_a",
        None,
    )
    assert (a.queue_concurrency, a.queue_max_retry) == (2, 7)  # the environment's retries
    assert (b.queue_table, b.queue_name, b.queue_subscriber_table) == (
        "fila_b",
        "mail_channel",
        "fila_b_subscriber",
    )
    assert (b.queue_concurrency, b.queue_max_retry, b.queue_task_timeout) == (3, 5, 1.5)
    assert a.db_host == b.db_host == "127.0.0.1"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "is required"),
        ("[{'queue': 1}]", "is not valid JSON"),
        ("[]", "non-empty JSON list"),
        ('{"queue": "a"}', "non-empty JSON list"),
    ],
)
def test_a_missing_or_malformed_value_is_named(text, why):
    assert why in problems(text)["WORKERS_JSON"]


def test_every_bad_entry_and_key_is_named_at_once():
    found = problems(
        [
            "fila",
            {"queue": "a"},
            {"queue": "b", "worker": f"{HERE}:Billing", "concurency": 2},
            {"queue": "c", "worker": f"{HERE}:Billing", "concurrency": "2"},
            {"queue": "d", "worker": f"{HERE}:Billing", "env": {"QUEUE_MAX_RETRIES": "5"}},
            {"queue": "e", "worker": f"{HERE}:Billing", "env": {"QUEUE_MAX_RETRY": "0"}},
            {"queue": "f", "worker": f"{HERE}:Billing", "concurrency": 0},
            {"queue": "g", "worker": f"{HERE}:Billing", "env": {"QUEUE_TABLE": "x"}},
            {"queue": "h; drop table x", "worker": f"{HERE}:Billing"},
        ]
    )
    assert found["WORKERS_JSON[0]"].startswith("must be an object")
    assert found["WORKERS_JSON[1].worker"] == "is required"
    assert found["WORKERS_JSON[2].concurency"].startswith("is not a known key")
    assert found["WORKERS_JSON[3].concurrency"] == 'must be a whole number, got "2"'
    assert found["WORKERS_JSON[4].env.QUEUE_MAX_RETRIES"] == "is not a variable of the settings"
    assert "WORKERS_JSON[5] QUEUE_MAX_RETRY" in found
    assert "WORKERS_JSON[6].concurrency" in found  # the settings' own check, named by its key
    assert "WORKERS_JSON[7].env.QUEUE_TABLE" in found
    assert "WORKERS_JSON[8].queue" in found  # not a table name
    assert len(found) == 9, found


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("tests.unit.test_workers_json.Billing", "must be 'package.module:ClassName'"),
        ("no_such_module_here:Billing", "cannot import 'no_such_module_here': ModuleNotFoundError"),
        (f"{HERE}:Nope", "has no 'Nope'"),
        (f"{HERE}:NotAWorker", "is not a WorkerBase subclass"),
        (f"{HERE}:NeedsMore", "(settings) failed: TypeError"),
    ],
)
def test_a_worker_class_that_cannot_be_loaded_or_built_is_named(path, why):
    found = problems([{"queue": "a", "worker": path}])
    assert why in found["WORKERS_JSON[0].worker"], found


def test_the_entrypoint_exits_with_code_2_naming_every_problem(capsys):
    environ = {**BASE, "WORKERS_JSON": json.dumps([{"queue": "a", "worker": "x:Y"}, {}])}
    with pytest.raises(SystemExit) as caught:
        main(environ)
    assert caught.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == (
        "nsj_queue_lib: invalid configuration: WORKERS_JSON[0].worker, "
        "WORKERS_JSON[1].queue, WORKERS_JSON[1].worker"
    )
