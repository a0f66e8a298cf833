"""The README stays short, its quick start is the tested example, and its links resolve.

tests/integration/test_examples.py runs ``examples/quickstart.py`` the way the
quick start's commands say (enqueue, worker, ``nsjq status``); here the
README must show exactly that file and those commands, so the quick start is
tested as written. The tutorial includes the same file with a snippet line,
which ``make docs`` resolves.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICKSTART = ROOT / "examples" / "quickstart.py"
TUTORIAL = ROOT / "docs" / "tutorial.md"
MAX_README_LINES = 400

REQUIRED_VARIABLES = ("DB_HOST", "DB_BASE", "DB_USER", "QUEUE_NAME", "QUEUE_TABLE")
# The commands test_examples.py::test_quickstart_... runs, in this order
# (each line of the block without its comment; db_gen's output goes to psql).
QUICKSTART_COMMANDS = [
    'python -m nsj_queue_lib.db_gen public quickstart | psql -h "$DB_HOST" -U "$DB_USER" "$DB_BASE"',
    "python examples/quickstart.py enqueue",
    "python examples/quickstart.py",
    "nsjq status",
]


def readme() -> str:
    return README.read_text(encoding="utf-8")


def quick_start_section() -> str:
    text = readme()
    start = text.index("## Quick start\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.M | re.S)


def test_the_readme_is_short():
    lines = readme().count("\n")
    assert lines < MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_the_quick_start_shows_the_tested_example_exactly():
    blocks = fenced_blocks(quick_start_section(), "python")
    assert blocks == [QUICKSTART.read_text(encoding="utf-8")], (
        "the README's quick start must embed examples/quickstart.py as it is"
    )


def test_the_quick_start_commands_are_the_tested_ones():
    (block,) = fenced_blocks(quick_start_section(), "sh")
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    exported = " ".join(line for line in lines if line.startswith("export "))
    assert [line for line in lines if not line.startswith("export ")] == QUICKSTART_COMMANDS
    for variable in REQUIRED_VARIABLES:
        assert f"{variable}=" in exported, variable


def test_the_tutorial_includes_the_same_example():
    assert '--8<-- "examples/quickstart.py"' in TUTORIAL.read_text(encoding="utf-8")


def test_the_install_line_says_what_the_package_index_has():
    install = readme()[readme().index("## Install\n") :]
    install = install[: install.index("\n## ", 1)]
    assert "pip install nsj-queue-lib` installs 1.2.2" in install
    assert "pip install ." in install


def test_every_relative_link_of_the_readme_exists():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme()):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
