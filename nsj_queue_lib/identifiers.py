"""Validation of the names that end up inside SQL text.

Table, schema and queue names cannot be bound as query parameters, so they
are checked here against a strict pattern before any SQL is built. Anything
that is not a plain identifier (letters, digits, underscore, not starting
with a digit) is refused.
"""

from __future__ import annotations

import re

from nsj_queue_lib.exceptions import InvalidIdentifierError

# PostgreSQL truncates identifiers at 63 bytes; MySQL allows 64. The stricter
# bound keeps one name valid on every dialect.
MAX_IDENTIFIER_LENGTH = 63

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_identifier(name: object, what: str = "identifier") -> str:
    """Return ``name`` if it is a plain identifier, else raise."""
    if not isinstance(name, str):
        raise InvalidIdentifierError(f"{what} must be a string, got {type(name).__name__}")
    if not _IDENTIFIER.match(name):
        raise InvalidIdentifierError(
            f"{what} {name!r} is not a plain identifier "
            "(letters, digits and '_', not starting with a digit)"
        )
    if len(name) > MAX_IDENTIFIER_LENGTH:
        raise InvalidIdentifierError(
            f"{what} {name!r} is longer than {MAX_IDENTIFIER_LENGTH} characters"
        )
    return name


def check_table_name(name: object, what: str = "table name") -> str:
    """Return ``name`` if it is ``table`` or ``schema.table``, else raise."""
    if not isinstance(name, str):
        raise InvalidIdentifierError(f"{what} must be a string, got {type(name).__name__}")
    parts = name.split(".")
    if len(parts) > 2:
        raise InvalidIdentifierError(f"{what} {name!r} must be 'table' or 'schema.table'")
    for part in parts:
        try:
            check_identifier(part, what)
        except InvalidIdentifierError:
            raise InvalidIdentifierError(
                f"{what} {name!r} must be 'table' or 'schema.table' made of plain "
                "identifiers (letters, digits and '_', not starting with a digit)"
            ) from None
    return name


def split_table_name(name: str) -> tuple[str | None, str]:
    """Split a checked table name into (schema or None, table)."""
    check_table_name(name)
    if "." in name:
        schema, table = name.split(".")
        return schema, table
    return None, name
