"""pgqueuer's side of ``bench_pgqueuer.py``: one pgqueuer worker process, async no-op entrypoint.

Environment: ``PGQ_DSN`` (libpq), ``PGQ_BATCH_SIZE`` (``QueueManager.run``'s
``batch_size``, pgqueuer's default 10), ``PGQUEUER_PREFIX`` (its objects'
prefix, so the benchmark's tables never meet another pgqueuer's),
``BENCH_READY_FILE`` (written once the worker listens) and optionally
``BENCH_LATENCY_FILE`` (``"<job id> <time.time()>"`` appended per job, as
``bench_worker.py`` does). SIGTERM stops it (exit 0).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import asyncpg
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager


async def main() -> None:
    conn = await asyncpg.connect(os.environ["PGQ_DSN"])
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    path = os.environ.get("BENCH_LATENCY_FILE")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        if fd is not None:
            os.write(fd, f"{job.id} {time.time():.6f}\n".encode())

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)

    async def ready() -> None:
        await asyncio.sleep(0.5)  # run() has verified the schema and issued its LISTEN
        Path(os.environ["BENCH_READY_FILE"]).write_text(str(os.getpid()))

    marker = asyncio.create_task(ready())
    await qm.run(batch_size=int(os.environ.get("PGQ_BATCH_SIZE") or 10))
    await marker


if __name__ == "__main__":
    asyncio.run(main())
