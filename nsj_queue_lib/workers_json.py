"""``WORKERS_JSON``: the queues one process serves, for ``python -m nsj_queue_lib.workers_json``.

```console
WORKERS_JSON='[
  {"queue": "public.fila_a", "worker": "app.workers:Billing", "concurrency": 4},
  {"queue": "public.fila_b", "worker": "app.workers:Mail", "env": {"QUEUE_MAX_RETRY": 5}}
]'
```

Each entry is a queue: ``queue`` (its table, as QUEUE_TABLE) and ``worker``
(``module:Class``, a ``WorkerBase`` subclass, built as ``Class(settings)``)
are required; ``name`` (QUEUE_NAME, default the table's name without its
schema), ``concurrency`` (QUEUE_CONCURRENCY), ``subscriber_table``
(QUEUE_SUBSCRIBER_TABLE, default none) and ``env`` (any other variable the
settings read, for this queue only) are optional. Every other variable comes
from the environment, shared by all queues; QUEUE_NAME, QUEUE_TABLE and
QUEUE_SUBSCRIBER_TABLE of the environment are ignored. The workers run in one
``WorkerGroup`` (docs/async-and-multi-queue.md). Everything is checked before
anything starts: one ``ConfigError`` names every problem (exit code 2).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.worker_base import EXIT_CONFIG_ERROR, WorkerBase
from nsj_queue_lib.worker_group import WorkerGroup

VARIABLE = "WORKERS_JSON"
# Entry keys that set a variable of their queue's settings.
KEY_VARIABLES = {
    "queue": "QUEUE_TABLE",
    "name": "QUEUE_NAME",
    "concurrency": "QUEUE_CONCURRENCY",
    "subscriber_table": "QUEUE_SUBSCRIBER_TABLE",
}
KEYS = ("worker", "env", *KEY_VARIABLES)
REQUIRED = ("queue", "worker")
# Of one queue only: never taken from the environment.
PER_QUEUE = ("QUEUE_NAME", "QUEUE_TABLE", "QUEUE_SUBSCRIBER_TABLE")


class RecordingEnviron(Mapping[str, str]):
    """An environment that remembers the variables asked for (which variables the settings
    read: also tests/unit/test_docs_environment.py)."""

    def __init__(self, values: Mapping[str, str]):
        self._values = dict(values)
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return self._values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def workers_from_env(environ: Mapping[str, str]) -> list[WorkerBase]:
    """The workers ``WORKERS_JSON`` describes, each with its settings; ``ConfigError`` names
    every problem (``WORKERS_JSON[1].worker``, ``WORKERS_JSON[0] QUEUE_MAX_RETRY``...)."""
    entries = _entries(environ.get(VARIABLE))
    problems: dict[str, str] = {}
    workers: list[WorkerBase] = []
    for index, entry in enumerate(entries):
        where = f"{VARIABLE}[{index}]"
        found = _entry_problems(entry)
        if found:
            problems.update({f"{where}{name}": why for name, why in found.items()})
            continue
        try:
            worker_class = _worker_class(entry["worker"])
            settings = _settings(environ, entry)
            workers.append(_build(worker_class, settings, entry["worker"]))
        except ConfigError as exc:
            found = {_named(where, name): why for name, why in exc.problems.items()}
            if "name" not in entry and f"{where}.queue" in found:
                found.pop(f"{where}.name", None)  # derived from the queue: one problem, not two
            problems.update(found)
    if problems:
        raise ConfigError(problems)
    return workers


def _entries(text: str | None) -> list[Any]:
    if text is None or not text.strip():
        raise ConfigError({VARIABLE: "is required: a JSON list of queues (docs/reference)"})
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError({VARIABLE: f"is not valid JSON: {exc}"}) from None
    if not isinstance(entries, list) or not entries:
        raise ConfigError({VARIABLE: "must be a non-empty JSON list of objects"})
    return entries


def _entry_problems(entry: Any) -> dict[str, str]:
    """Problems of an entry's form, by ``.key`` (or "" for the entry itself)."""
    if not isinstance(entry, dict):
        return {"": f"must be an object, got {json.dumps(entry)[:80]}"}
    problems = {f".{key}": "is required" for key in REQUIRED if key not in entry}
    for key in entry:
        if key not in KEYS:
            problems[f".{key}"] = f"is not a known key (known: {', '.join(KEYS)})"
    for key in ("queue", "worker", "name", "subscriber_table"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            problems[f".{key}"] = f"must be a non-empty string, got {json.dumps(entry[key])}"
    concurrency = entry.get("concurrency")
    if "concurrency" in entry and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int)
    ):
        problems[".concurrency"] = f"must be a whole number, got {json.dumps(concurrency)}"
    env = entry.get("env", {})
    if not isinstance(env, dict):
        problems[".env"] = "must be an object of variables"
    else:
        for name, value in env.items():
            if name in PER_QUEUE:
                problems[f".env.{name}"] = "is set by the entry's keys (queue, name, ...)"
            elif value is not None and not isinstance(value, (str, int, float, bool)):
                problems[f".env.{name}"] = "must be a string, a number or a boolean"
    return problems


def _worker_class(path: str) -> type[WorkerBase]:
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise ConfigError({".worker": f"must be 'package.module:ClassName', got {path!r}"})
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the configuration's
        raise ConfigError(
            {".worker": f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"}
        ) from None
    found = getattr(module, class_name, None)
    if found is None:
        raise ConfigError({".worker": f"module {module_name!r} has no {class_name!r}"})
    if not isinstance(found, type) or not issubclass(found, WorkerBase):
        raise ConfigError({".worker": f"{path} is not a WorkerBase subclass"})
    return found


def _variable_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _settings(environ: Mapping[str, str], entry: dict[str, Any]) -> Settings:
    values = {k: v for k, v in environ.items() if k not in PER_QUEUE and k != VARIABLE}
    values["QUEUE_NAME"] = entry["queue"].rsplit(".", 1)[-1]
    for key, variable in KEY_VARIABLES.items():
        if key in entry:
            values[variable] = _variable_text(entry[key])
    overrides = {k: _variable_text(v) for k, v in entry.get("env", {}).items() if v is not None}
    values.update(overrides)
    recording = RecordingEnviron(values)
    try:
        settings = Settings.from_env(recording)
    finally:
        unknown = sorted(set(overrides) - recording.asked)
    if unknown:
        raise ConfigError({f".env.{name}": "is not a variable of the settings" for name in unknown})
    return settings


def _build(worker_class: type[WorkerBase], settings: Settings, path: str) -> WorkerBase:
    try:
        return worker_class(settings)
    except Exception as exc:  # noqa: BLE001 - a worker that cannot be built is misconfigured
        raise ConfigError(
            {".worker": f"{path}(settings) failed: {type(exc).__name__}: {exc}"}
        ) from None


def _named(where: str, name: str) -> str:
    """A problem's name under its entry: ``.worker`` keys, or the settings' variable."""
    if name.startswith("."):
        return f"{where}{name}"
    keys = {variable: key for key, variable in KEY_VARIABLES.items()}
    return f"{where}.{keys[name]}" if name in keys else f"{where} {name}"


def main(environ: Mapping[str, str] | None = None) -> None:
    """Run the workers of WORKERS_JSON until SIGTERM; exits the process (2: bad configuration)."""
    try:
        workers = workers_from_env(os.environ if environ is None else environ)
    except ConfigError as exc:
        for name, why in exc.problems.items():
            print(f"nsj_queue_lib: configuration error: {name} {why}", file=sys.stderr)
        print(f"nsj_queue_lib: invalid configuration: {', '.join(exc.problems)}", file=sys.stderr)
        sys.exit(EXIT_CONFIG_ERROR)
    WorkerGroup(workers).run()


if __name__ == "__main__":
    main()
