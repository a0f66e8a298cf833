"""Importing any module of the package never reads the environment in a way that can fail."""

from __future__ import annotations

import os
from pathlib import Path

import nsj_queue_lib
from tests.helpers.processes import python_report

PACKAGE_DIR = Path(nsj_queue_lib.__file__).resolve().parent

SCRIPT = r"""
import importlib, json, os, pkgutil, sys, traceback
from pathlib import Path

import nsj_queue_lib

package_dir = Path(nsj_queue_lib.__file__).resolve().parent
names = {"nsj_queue_lib"}
# pkgutil finds regular packages and modules...
for info in pkgutil.walk_packages(nsj_queue_lib.__path__, "nsj_queue_lib."):
    names.add(info.name)
# ...and the file walk adds modules inside namespace sub-packages (no __init__.py).
for path in package_dir.rglob("*.py"):
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    if "__pycache__" in parts:
        continue
    if parts[-1] == "__init__":
        parts = parts[:-1]
    names.add(".".join(parts))
# __main__ modules are entry points: importing one runs the program.
names = sorted(n for n in names if not n.endswith(".__main__"))
failures = {}
for name in names:
    try:
        importlib.import_module(name)
    except BaseException:
        failures[name] = traceback.format_exc()
public = {}
for attribute in nsj_queue_lib.__all__:
    try:
        getattr(nsj_queue_lib, attribute)
        public[attribute] = "ok"
    except BaseException as exc:
        public[attribute] = repr(exc)
print(json.dumps({"imported": names, "failures": failures, "public": public,
                  "environ": sorted(os.environ)}))
"""


def run_with_empty_environment():
    environ = {}
    # Only what the interpreter itself needs; no database or queue variable.
    if os.environ.get("PATH"):
        environ["PATH"] = os.environ["PATH"]
    return python_report(SCRIPT, environ, timeout=120)


def test_every_module_imports_with_an_empty_environment():
    report = run_with_empty_environment()
    assert not [v for v in report["environ"] if v.startswith(("DB_", "DATABASE_", "QUEUE_"))]
    assert report["failures"] == {}, "\n".join(report["failures"].values())
    expected = {
        "nsj_queue_lib",
        "nsj_queue_lib.settings",
        "nsj_queue_lib.identifiers",
        "nsj_queue_lib.payload",
        "nsj_queue_lib.queue_client",
        "nsj_queue_lib.db_gen",
        "nsj_queue_lib.model",
        "nsj_queue_lib.db.sql_files",
        "nsj_queue_lib.db.postgres.store",
        "nsj_queue_lib.db.postgres.dialect",
    }
    assert expected <= set(report["imported"])
    on_disk = {
        p
        for p in PACKAGE_DIR.rglob("*.py")
        if "__pycache__" not in p.parts and p.name != "__main__.py"
    }
    assert len(report["imported"]) >= len(on_disk)


def test_public_names_resolve_with_an_empty_environment():
    report = run_with_empty_environment()
    # Names whose module is not written yet are reported by the import test above
    # once the module exists; what exists must resolve.
    existing = {
        name: status for name, status in report["public"].items() if "No module named" not in status
    }
    assert all(status == "ok" for status in existing.values()), existing
    assert report["public"]["QueueClient"] == "ok"
    assert report["public"]["Settings"] == "ok"
