"""Shared helpers of the test suite (databases, subprocesses, catalog snapshots).

Fixtures live in ``tests/conftest.py``; the logic they use lives here so it
can be imported by tests and unit-tested itself.
"""
