"""Latency of the web API's reads on a queue of 1,000,000 rows (PostgreSQL).

    .venv/bin/python benchmarks/bench_web.py                   # ~2 min: seed, then measure
    .venv/bin/python benchmarks/bench_web.py --rows 100000     # quicker
    .venv/bin/python benchmarks/bench_web.py --json            # one JSON object on stdout

The database is ``BENCH_PG_DSN`` (default ``host=127.0.0.1 user=postgres dbname=test``)
or ``--dsn``. A fresh queue (db_gen, dropped afterwards) is seeded with
``QueueClient.insert_tasks`` in batches of 50,000, one task a second of history; 98 % are
settled (``sucesso``, 1 % ``falha`` exhausted, 1 % left ``pendente``), as a queue with
history looks, and the table is analysed. A real server process
(``python -m nsj_queue_lib.web``, uvicorn, loopback, with a token) answers
``--requests`` sequential requests per endpoint from one keep-alive HTTP client;
each latency is the client's, request sent to body read. Printed: p50, p95 and
max in ms per endpoint, with the 20 ms target for GET task and the lists.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx  # the test extra pins httpx2 (what starlette's TestClient uses)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._harness import connect, fresh_queue, task_rows
from nsj_queue_lib.queue_client import QueueClient

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-web-token-0123456789"
BATCH = 50_000
TARGET_MS = 20.0


def seed(dsn: str, table: str, rows: int) -> None:
    with connect(dsn) as conn:
        client = QueueClient(conn, table)
        for start in range(0, rows, BATCH):
            client.insert_tasks(task_rows(min(BATCH, rows - start), start))
            conn.commit()
        # History: one task a second until now, most of them done, 1 % exhausted
        # failures, 1 % still waiting.
        conn.execute(
            f"UPDATE {table} SET data_hora = clock_timestamp() - (%(rows)s - id) * interval '1 s'",
            {"rows": rows},
        )
        conn.execute(
            f"UPDATE {table} SET status = CASE WHEN id % 100 = 7 THEN 'falha' ELSE 'sucesso' END,"
            " estouro_tentativas = (id % 100 = 7) WHERE id % 100 <> 3"
        )
        conn.commit()
    with connect(dsn, autocommit=True) as admin:
        admin.execute(f"VACUUM ANALYZE {table}")


def explain(dsn: str, table: str) -> dict[str, str]:
    """EXPLAIN (ANALYZE) of the overview's queries (the inspection store's own SQL)."""
    from nsj_queue_lib.db.inspection import RATE_WINDOW, RECENT_BUCKET, RECENT_WINDOW
    from nsj_queue_lib.db.postgres.inspection import PostgresInspectionStore

    sql = PostgresInspectionStore(table).sql
    recent = {"window": RECENT_WINDOW, "bucket": RECENT_BUCKET, "rate_window": RATE_WINDOW}
    params = {"depth": {}, "recent": recent, "running_by_worker": {}}
    plans = {}
    with connect(dsn, autocommit=True) as conn:
        for name, values in params.items():
            rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql[name], values).fetchall()
            plans[name] = "\n".join(row[0] for row in rows)
    return plans


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(dsn: str, table: str, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DB_", "DATABASE_", "QUEUE_"))}
    env.update(
        DB_DSN=dsn,
        QUEUE_TABLE=table,
        QUEUE_WEB_TOKEN=TOKEN,
        QUEUE_WEB_HOST="127.0.0.1",
        QUEUE_WEB_PORT=str(port),
        PYTHONPATH=str(ROOT),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "nsj_queue_lib.web"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(client: httpx.Client, paths: list[str]) -> dict[str, float]:
    times = []
    for path in paths:
        begin = time.perf_counter()
        response = client.get(path)
        response.read()
        times.append((time.perf_counter() - begin) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:200]}")
    return {
        "p50": round(percentile(times, 0.50), 2),
        "p95": round(percentile(times, 0.95), 2),
        "max": round(max(times), 2),
    }


def endpoints(table: str, rows: int, requests: int) -> dict[str, list[str]]:
    rng = random.Random(7)
    q = f"queue={table}"
    return {
        "GET /api/v1/tasks/{id} (random id)": [
            f"/api/v1/tasks/{rng.randint(1, rows)}?{q}" for _ in range(requests)
        ],
        "GET /api/v1/tasks (first page, 50)": [f"/api/v1/tasks?{q}"] * requests,
        "GET /api/v1/tasks?cursor= (random page)": [
            f"/api/v1/tasks?{q}&cursor={rng.randint(100, rows)}" for _ in range(requests)
        ],
        "GET /api/v1/tasks?status=pendente": [f"/api/v1/tasks?{q}&status=pendente"] * requests,
        "GET /api/v1/tasks?status=falha": [f"/api/v1/tasks?{q}&status=falha"] * requests,
        "GET /api/v1/queues/{queue}/stats": [f"/api/v1/queues/{table}/stats"] * (requests // 5),
    }


def run(dsn: str, rows: int, requests: int, plans: bool) -> dict[str, dict[str, float]]:
    with fresh_queue(dsn) as name:
        table = f"public.{name}"
        started = time.monotonic()
        seed(dsn, table, rows)
        print(f"seeded {rows:,} rows in {time.monotonic() - started:.0f} s", file=sys.stderr)
        if plans:
            for name, plan in explain(dsn, table).items():
                print(f"-- {name}\n{plan}\n", file=sys.stderr)
        port = free_port()
        server = start_server(dsn, table, port)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as client:
                for _ in range(200):
                    try:
                        client.get("/health")
                        break
                    except httpx.TransportError:
                        time.sleep(0.05)
                results = {}
                for name, paths in endpoints(table, rows, requests).items():
                    measure(client, paths[:20])  # warm-up: connections, plans, caches
                    results[name] = measure(client, paths)
                return results
        finally:
            server.terminate()
            server.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn", default=os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test")
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--explain", action="store_true", help="print the overview's plans")
    args = parser.parse_args()
    results = run(args.dsn, args.rows, args.requests, args.explain)
    if args.json:
        print(json.dumps({"rows": args.rows, "results": results}))
        return 0
    print(
        f"| endpoint ({args.rows:,} rows, {args.requests} requests) | p50 ms | p95 ms | max ms | target |"
    )
    print("| --- | ---: | ---: | ---: | --- |")
    for name, r in results.items():
        target = (
            ""
            if "stats" in name
            else f"p95 <= {TARGET_MS:g}: {'met' if r['p95'] <= TARGET_MS else 'MISSED'}"
        )
        print(f"| {name} | {r['p50']} | {r['p95']} | {r['max']} | {target} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
