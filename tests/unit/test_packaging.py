"""What the distribution declares: version, typing marker, extras, the webhook worker's --help."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import nsj_queue_lib

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_is_the_installed_distributions():
    assert nsj_queue_lib.__version__ == importlib.metadata.version("nsj-queue-lib")
    assert nsj_queue_lib.__version__ == pyproject()["project"]["version"]
    assert "__version__" in dir(nsj_queue_lib)


def test_version_of_a_tree_that_was_never_installed(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert nsj_queue_lib._version() == "0+unknown"


def test_the_distribution_declares_typing_extras_and_the_core_dependencies():
    project = pyproject()["project"]
    assert sorted(d.split(">")[0] for d in project["dependencies"]) == [
        "cronsim",
        "psycopg-pool",
        "psycopg[binary]",
        "pymysql",
        "requests",
    ]
    assert project["optional-dependencies"]["metrics"] == ["prometheus_client>=0.20"]
    assert "loki" in project["optional-dependencies"]
    assert "Typing :: Typed" in project["classifiers"]
    assert (ROOT / "nsj_queue_lib" / "py.typed").exists()
    package_data = pyproject()["tool"]["setuptools"]["package-data"]["nsj_queue_lib"]
    assert "py.typed" in package_data


def webhook_worker(*args: str) -> subprocess.CompletedProcess:
    """``python -m nsj_queue_lib.worker_webhook`` with ``args`` and no configuration at all."""
    return subprocess.run(
        [sys.executable, "-m", "nsj_queue_lib.worker_webhook", *args],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_worker_webhook_help_needs_no_configuration():
    shown = webhook_worker("--help")
    assert shown.returncode == 0, shown.stderr
    assert "QUEUE_SUBSCRIBER_TABLE" in shown.stdout and "Exit codes" in shown.stdout
    wrong = webhook_worker("--no-such-option")
    assert wrong.returncode == 2 and "unrecognized arguments" in wrong.stderr
