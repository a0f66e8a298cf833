"""The Django integration's tests need the ``django`` extra (make venv installs it)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers.databases import ci_enabled


def require_django() -> None:
    """Skip the calling test module when Django is missing; fail it under CI=true."""
    if importlib.util.find_spec("django") is not None:
        return
    if ci_enabled():
        pytest.fail("Django is missing (the django extra; CI=true: make venv installs it)")
    pytest.skip("Django is not installed (pip install -e '.[django]')", allow_module_level=True)
