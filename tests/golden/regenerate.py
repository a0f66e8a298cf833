"""Rewrite the DDL golden files and database/<dialect>/fila_teste.sql from the generator.

    python tests/golden/regenerate.py           # rewrite every file
    python tests/golden/regenerate.py --check   # exit 1 and list the stale files

Each file is exactly the stdout of ``python -m nsj_queue_lib.db_gen`` with
the arguments listed in OUTPUTS. Review the diff before committing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: makes ``tests.helpers`` importable
    sys.path.insert(0, str(ROOT))

from tests.helpers.golden import db_gen  # noqa: E402 - needs the sys.path entry above

# file (relative to the repository root) -> db_gen arguments
OUTPUTS: dict[str, list[str]] = {
    "tests/golden/postgres_create.sql": ["public", "fila_teste"],
    "tests/golden/postgres_upgrade.sql": ["public", "fila_teste", "--upgrade"],
    "database/postgres/fila_teste.sql": ["public", "fila_teste"],
    "tests/golden/mysql_create.sql": ["public", "fila_teste", "--dialect", "mysql"],
    "tests/golden/mysql_upgrade.sql": ["public", "fila_teste", "--dialect", "mysql", "--upgrade"],
    "database/mysql/fila_teste.sql": ["public", "fila_teste", "--dialect", "mysql"],
    # The MySQL 8 variant (db_gen --server mysql).
    "tests/golden/mysql8_create.sql": [
        "public",
        "fila_teste",
        "--dialect",
        "mysql",
        "--server",
        "mysql",
    ],
    "tests/golden/mysql8_upgrade.sql": [
        "public",
        "fila_teste",
        "--dialect",
        "mysql",
        "--server",
        "mysql",
        "--upgrade",
    ],
    "tests/golden/postgres_drop_old_routines.sql": ["public", "fila_teste", "--drop-old-routines"],
    "tests/golden/mysql_drop_old_routines.sql": [
        "public",
        "fila_teste",
        "--dialect",
        "mysql",
        "--drop-old-routines",
    ],
    "tests/golden/singlestore_create.sql": ["public", "fila_teste", "--dialect", "singlestore"],
    "database/singlestore/fila_teste.sql": ["public", "fila_teste", "--dialect", "singlestore"],
}


def generate(args: list[str]) -> str:
    """stdout of ``python -m nsj_queue_lib.db_gen <args>``; raises if it exits non-zero."""
    result = db_gen(*args)
    if result.returncode != 0:
        raise RuntimeError(f"db_gen {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1)")
    options = parser.parse_args(argv)
    stale = []
    for relative, args in OUTPUTS.items():
        path = ROOT / relative
        text = generate(args)
        current = path.read_text("utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(relative)
        if not options.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, "utf-8", newline="\n")
            print(f"rewrote {relative}")
    if options.check and stale:
        print("stale (run python tests/golden/regenerate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
