"""The group settle statement on a 50,000-row backlog against a 5,000-row table (issue 16).

Paired, interleaved groups of 50 on one PostgreSQL; tables dropped after.
    BENCH_PG_DSN=... .venv/bin/python benchmarks/settle_backlog.py
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import psycopg
from bench_mysql import task_rows

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.postgres.session import settle_sql
from nsj_queue_lib.db_gen import render

DSN = os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test")


def joined(t):
    """The statement before: the mensagens by a join with the unnested arrays."""
    return (
        "WITH done AS ( SELECT * FROM unnest($1::bigint[], $2::text[]) AS m(id, mensagem)"
        f"), settled AS ( UPDATE {t} AS t SET status = 'sucesso', mensagem = done.mensagem"
        " FROM done WHERE t.id = ANY($1::bigint[]) AND t.id = done.id"
        " AND t.status = 'processando' RETURNING t.id"
        ") SELECT (SELECT count(*) FROM settled) AS settled,"
        " count(*) FILTER (WHERE pg_advisory_unlock($3::int4, (done.id % 2147483648)::int4))"
        " AS unlocked FROM done"
    )


variants = {"join (before)": joined, "array_position (settle_sql)": settle_sql}
adm = psycopg.connect(DSN, autocommit=True)
cases = []
for k, v in enumerate(variants):
    for n in (5000, 50000):
        name = f"mb_settle_{k}_{n}"
        adm.execute(
            f"DROP TABLE IF EXISTS public.{name}, public.{name}_subscriber,"
            f" public.{name}_limits, public.{name}_periodic CASCADE"
        )
        adm.execute(render("public", name))
        c = psycopg.connect(DSN)
        QueueClient(c, f"public.{name}").insert_tasks(task_rows(n))
        c.commit()
        c.execute("PREPARE s AS " + variants[v](f"public.{name}"))
        c.commit()
        cases.append((v, n, f"public.{name}", c))
times = {(v, n): [] for v, n, _, _ in cases}
for g in range(90):
    for v, n, t, c in cases if g % 2 else cases[::-1]:
        ids = [
            r[0]
            for r in c.execute(
                f"UPDATE {t} SET status='processando' WHERE id IN (SELECT id FROM {t}"
                " WHERE status='pendente' ORDER BY prioridade DESC, data_hora, id"
                " LIMIT 50 FOR UPDATE SKIP LOCKED) RETURNING id"
            ).fetchall()
        ]
        c.commit()
        arr = "{" + ",".join(map(str, ids)) + "}"
        msgs = "{" + ",".join(f'"m{i}"' for i in ids) + "}"
        t0 = time.perf_counter()
        r = c.execute(f"EXECUTE s('{arr}', '{msgs}', 7)").fetchall()
        times[(v, n)].append(time.perf_counter() - t0)
        assert r[0][0] == len(ids), r
        c.commit()
med = {k: statistics.median(ts[10:]) * 1000 for k, ts in times.items()}
for k, m in med.items():
    print(k, "median settle ms", round(m, 3))
for v in variants:
    print(v, "50k/5k", round(med[(v, 50000)] / med[(v, 5000)], 2))
for _v, _n, t, c in cases:
    bad = c.execute(
        f"SELECT count(*) FROM {t} WHERE status='sucesso' AND mensagem <> 'm' || id"
    ).fetchone()[0]
    assert bad == 0
    c.close()  # its open transaction would block the DROP below
    adm.execute(f"DROP TABLE IF EXISTS {t}, {t}_subscriber, {t}_limits, {t}_periodic CASCADE")
