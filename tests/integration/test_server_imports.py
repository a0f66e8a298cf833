"""The server (and the client library) never import the worker runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
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
