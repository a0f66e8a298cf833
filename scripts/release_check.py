"""The release as a user gets it: build the sdist and the wheel, check them, install the wheel
in a clean virtual environment and run the README's quick start with it.

    .venv/bin/python scripts/release_check.py            # make release-check; .ci/run runs it

1. ``python -m build`` into a temporary directory (sdist, then the wheel built from it),
   and ``twine check`` on both (the metadata PyPI would show).
2. A new virtual environment outside the checkout, ``pip install <wheel>`` (its
   dependencies from the package index): the installed version is the project's.
3. The quick start (``examples/quickstart.py``, copied next to nothing of the checkout)
   against the PostgreSQL of ``TEST_PG_DSN`` (libpq syntax; default the machine's):
   ``python -m nsj_queue_lib.db_gen`` creates a fresh queue, ``quickstart.py enqueue``
   enqueues a task, ``quickstart.py`` runs the worker until the task is 'sucesso', SIGTERM
   stops it (exit 0), and the installed ``nsjq status --json`` reports the task done.
   The queue is dropped afterwards.

Exits non-zero with the failing step's output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parents[1]
DSN = os.environ.get("TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test")
WORKER_TIMEOUT = 60.0


class ReleaseCheckError(Exception):
    pass


def run(args: list[str], **kwargs) -> str:
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise ReleaseCheckError(
            f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def build(out: Path) -> tuple[Path, Path]:
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)])
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)])
    return sdist, wheel


def clean_venv(where: Path, wheel: Path) -> Path:
    run([sys.executable, "-m", "venv", str(where)])
    python = where / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", str(wheel)])
    version = run(
        [str(python), "-c", "import nsj_queue_lib; print(nsj_queue_lib.__version__)"], cwd=where
    ).strip()
    # (tomllib is Python 3.11's; the project supports 3.10)
    project = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert project is not None, "pyproject.toml has no version"
    if version != project.group(1):
        raise ReleaseCheckError(
            f"the wheel installs version {version}, the project is {project.group(1)}"
        )
    return python


def queue_env(queue: str) -> dict[str, str]:
    params = conninfo_to_dict(DSN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DB_", "QUEUE_"))}
    env.pop("PYTHONPATH", None)  # nothing of the checkout
    env.update(
        DB_HOST=str(params.get("host", "127.0.0.1")),
        DB_PORT=str(params.get("port", "5432")),
        DB_BASE=str(params.get("dbname", "test")),
        DB_USER=str(params.get("user", "postgres")),
        DB_PASS=str(params.get("password", "")),
        QUEUE_NAME=queue,
        QUEUE_TABLE=f"public.{queue}",
    )
    return env


def quick_start(python: Path, workdir: Path) -> None:
    queue = f"release_{uuid.uuid4().hex[:8]}"
    env = queue_env(queue)
    script = workdir / "quickstart.py"
    shutil.copy(ROOT / "examples" / "quickstart.py", script)
    ddl = run([str(python), "-m", "nsj_queue_lib.db_gen", "public", queue], cwd=workdir, env=env)
    with psycopg.connect(DSN, autocommit=True) as admin:
        admin.execute(ddl)
        try:
            run([str(python), str(script), "enqueue"], cwd=workdir, env=env)
            _run_worker(python, script, workdir, env, admin, queue)
            status = json.loads(
                run([str(python.parent / "nsjq"), "status", "--json"], cwd=workdir, env=env)
            )
            done = {p["processo"]: p["counts"]["sucesso"] for p in status["processos"]}
            if done != {"greet": 1}:
                raise ReleaseCheckError(f"nsjq status does not show the task done: {status}")
            print(f"nsjq status --json: greet {done['greet']} sucesso")
        finally:
            admin.execute(f"DROP TABLE IF EXISTS public.{queue} CASCADE")
            for suffix in ("subscriber", "limits", "periodic", "workers"):
                admin.execute(f"DROP TABLE IF EXISTS public.{queue}_{suffix} CASCADE")


def _run_worker(python: Path, script: Path, workdir: Path, env: dict, admin, queue: str) -> None:
    log = workdir / "worker.log"
    with open(log, "w") as out:
        worker = subprocess.Popen(
            [str(python), str(script)], cwd=workdir, env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT
        sql = f"SELECT count(*) FROM public.{queue} WHERE status = 'sucesso'"
        while admin.execute(sql).fetchone()[0] < 1:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise ReleaseCheckError(f"the worker did not run the task:\n{log.read_text()}")
            time.sleep(0.2)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
    if code != 0:
        raise ReleaseCheckError(f"the worker exited {code}:\n{log.read_text()}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="nsjq-release-") as tmp:
        tmp_path = Path(tmp)
        try:
            sdist, wheel = build(tmp_path / "dist")
            print(f"built and checked {sdist.name} and {wheel.name}")
            python = clean_venv(tmp_path / "venv", wheel)
            print(f"installed {wheel.name} in a clean virtual environment")
            workdir = tmp_path / "user"
            workdir.mkdir()
            quick_start(python, workdir)
        except ReleaseCheckError as exc:
            print(f"release check failed: {exc}", file=sys.stderr)
            return 1
    print("release check passed: the wheel installs and runs the quick start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
