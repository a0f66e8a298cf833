"""Every benchmark script imports cleanly: `make bench` is not part of CI, so a
module-level mistake in the shared harness (it once asked sysconf for a name that
does not exist) would otherwise break every benchmark unnoticed."""

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# The bench extra (pyproject.toml): absent where only the test extra is installed.
OPTIONAL = {"pgqueuer", "asyncpg", "uvloop"}

PROBE = """
import importlib, sys
sys.path.insert(0, sys.argv[1])
optional = set(sys.argv[2].split(","))
for name in sys.argv[3:]:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in optional:
            print(f"{name}: {error!r}")
    except BaseException as error:
        print(f"{name}: {error!r}")
"""


def test_every_benchmark_module_imports():
    names = sorted(path.stem for path in BENCHMARKS.glob("*.py"))
    assert "_harness" in names and "bench_pgqueuer" in names
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(BENCHMARKS), ",".join(sorted(OPTIONAL)), *names],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCHMARKS.parent,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "", result.stdout
