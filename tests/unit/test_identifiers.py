"""Names that end up inside SQL text: only plain identifiers pass."""

from __future__ import annotations

import pytest

from nsj_queue_lib.exceptions import InvalidIdentifierError
from nsj_queue_lib.identifiers import (
    MAX_IDENTIFIER_LENGTH,
    check_identifier,
    check_table_name,
    split_table_name,
)

GOOD = ["fila", "fila_teste", "_x", "F1", "a" * MAX_IDENTIFIER_LENGTH, "Fila_Teste_2"]
BAD = [
    "",
    " ",
    "fila teste",
    " fila",
    "fila ",
    "fila;drop table x",
    "x;",
    '"fila"',
    "fila'",
    "fi'la",
    "fila--",
    "1abc",
    "9",
    "fila-teste",
    "filação",
    "ｆｉｌａ",  # full-width letters
    "fila\n",
    "fila\x00",
    "fila\t",
    "a" * (MAX_IDENTIFIER_LENGTH + 1),
    "fila.teste",
    "$1",
    "fila)",
    "fila/*",
]


@pytest.mark.parametrize("name", GOOD)
def test_plain_identifiers_pass(name):
    assert check_identifier(name) == name


@pytest.mark.parametrize("name", BAD)
def test_everything_else_is_refused(name):
    with pytest.raises(InvalidIdentifierError):
        check_identifier(name)


@pytest.mark.parametrize("value", [None, 1, b"fila", ["fila"]])
def test_non_strings_are_refused(value):
    with pytest.raises(InvalidIdentifierError):
        check_identifier(value)
    with pytest.raises(InvalidIdentifierError):
        check_table_name(value)


def test_errors_are_value_errors_and_name_what_was_checked():
    with pytest.raises(ValueError, match="queue name"):
        check_identifier("a b", "queue name")
    with pytest.raises(ValueError, match="must be 'table' or 'schema.table'"):
        check_table_name("a.b.c")


def test_too_long_is_refused_with_a_clear_message():
    with pytest.raises(InvalidIdentifierError, match="longer than 63"):
        check_identifier("a" * 64)


@pytest.mark.parametrize("name", ["fila", "public.fila", "s1._t", "a" * 63 + "." + "b" * 63])
def test_table_names(name):
    assert check_table_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "a.b.c",
        ".fila",
        "fila.",
        "public..fila",
        "public.fila;",
        'public."fila"',
        "public. fila",
        "public.fila x",
        "pub lic.fila",
        "",
        ".",
        "public.1fila",
        "public.fila'",
        "a" * 64 + ".b",
    ]
    + [b for b in BAD if "." not in b],
)
def test_bad_table_names(name):
    with pytest.raises(InvalidIdentifierError):
        check_table_name(name)


def test_split_table_name():
    assert split_table_name("public.fila") == ("public", "fila")
    assert split_table_name("fila") == (None, "fila")
    with pytest.raises(InvalidIdentifierError):
        split_table_name("a.b.c")
