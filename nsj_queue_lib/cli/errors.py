"""What ends a command early, and its exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_NOTHING = 1  # not found, or nothing to do
EXIT_USAGE = 2  # bad usage or configuration, or the database refused


class UsageError(Exception):
    """Bad arguments or configuration: exit code 2, ``str(exc)`` on stderr."""


class NothingToDo(Exception):
    """The task is not there, or it is in no state for the operation: exit code 1."""
