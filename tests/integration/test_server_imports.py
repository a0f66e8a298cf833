"""The server (and the client library) never import the worker runtime."""

from __future__ import annotations

import os

from tests.helpers.processes import python_report
from tests.helpers.server_process import ROOT

SCRIPT = r"""
import importlib, json, pkgutil, sys

import nsj_queue_lib.server, nsj_queue_lib.client

names = ["nsj_queue_lib.protocol"]
for package in (nsj_queue_lib.server, nsj_queue_lib.client):
    names.append(package.__name__)
    names += [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
for name in names:
    importlib.import_module(name)  # __main__ only runs the server under "python -m"
print(json.dumps({"imported": sorted(names), "modules": sorted(sys.modules)}))
"""


def test_server_and_client_never_import_the_runtime():
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    report = python_report(SCRIPT, env)
    assert {
        "nsj_queue_lib.server.loop",
        "nsj_queue_lib.server.check_tasks",
        "nsj_queue_lib.server.app",
        "nsj_queue_lib.server.__main__",
        "nsj_queue_lib.client.lock_client",
    } <= set(report["imported"])
    leaked = [
        m
        for m in report["modules"]
        if m.startswith(("nsj_queue_lib.runtime", "nsj_queue_lib.worker_"))
        or m == "nsj_queue_lib.notify"
    ]
    assert leaked == []
