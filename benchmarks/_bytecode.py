"""The library's bytecode, compiled before any benchmark worker starts.

A worker installed from the wheel starts from the ``.pyc`` files pip compiled at install
time. A source checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (this machine's default, and
many images') has none, so every worker process would compile each module again (about
0.12 s of every start here) and the backlog rows, timed from the workers' start, would
measure the compiler. ``compileall`` writes the files whatever that variable says.
"""

from __future__ import annotations

import compileall
import functools
from pathlib import Path

import nsj_queue_lib

HERE = Path(__file__).resolve().parent


@functools.cache
def compile_library() -> None:
    """Compile ``nsj_queue_lib`` and the benchmark worker once per process (quietly)."""
    compileall.compile_dir(Path(nsj_queue_lib.__file__).parent, quiet=1)
    compileall.compile_file(HERE / "bench_worker.py", quiet=1)
