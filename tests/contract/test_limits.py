"""Per-processo limits (CONTRACT.md section 7, docs/flow-control.md) with several worker
processes, on PostgreSQL (direct and through the socket server) and MariaDB.

max_concurrent holds across processes and frees the slot of a worker killed mid-task
(rescued, nothing run twice); rate_limit and interval_s space the starts cluster-wide;
a held-back processo delays no other one; a worker whose class declares bad limits
refuses to start (exit code 2, the processo and option named).
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time

import pytest

from tests.contract.backends import seconds
from tests.contract.test_contract import RETRY_BASE_MINUTES
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(90)

BACKENDS = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)
LIMITS_WORKER = __import__("pathlib").Path(__file__).parent / "workers" / "limits_worker.py"


def start_workers(backend, spec: dict, count: int, concurrency: int = 3, **env):
    procs = [
        backend.start_process(
            f"lim{i}",
            wait_ready=False,
            script=LIMITS_WORKER,
            LIMITS_SPEC=json.dumps(spec),
            QUEUE_CONCURRENCY=str(concurrency),
            **env,
        )
        for i in range(count)
    ]
    backend.wait_processes_ready(procs)
    return procs


class RunningSampler:
    """Samples, from the table, how many tasks of a processo are 'processando'."""

    def __init__(self, backend, processo: str):
        self.backend, self.processo = backend, processo
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def _run(self):
        conn = self.backend.connect(autocommit=True)
        try:
            while not self._stop.is_set():
                with conn.cursor() as cur:
                    cur.execute(
                        f"SELECT count(*) FROM {self.backend.table} "
                        "WHERE processo = %s AND status = 'processando'",
                        (self.processo,),
                    )
                    self.samples.append(int(cur.fetchone()[0]))
                time.sleep(0.01)
        finally:
            conn.close()


def starts(backend, chave: str | None = None) -> list:
    where = "" if chave is None else f" WHERE chave = '{chave}'"
    return [
        r["at"] for r in backend.query(f"SELECT at FROM {backend.exec_table}{where} ORDER BY at")
    ]


@BACKENDS
def test_max_concurrent_holds_across_processes_and_delays_no_other_processo(backend):
    start_workers(backend, {"capped": {"max_concurrent": 2}}, count=2)
    slow = json.dumps({"sleep": 0.3})
    with RunningSampler(backend, "capped") as sampler:
        backend.enqueue(
            [dict(processo="capped", payload=slow, chave_externa="capped")] * 8
            + [dict(processo="free", payload="x", chave_externa="free")] * 3,
            bulk=True,
        )
        # The free tasks do not wait behind the capped ones.
        wait_for(lambda: len(starts(backend, "free")) == 3, 5, "the unlimited tasks")
        backend.wait_statuses({"sucesso": 11}, 30, "every task")
    assert max(sampler.samples) == 2, sampler.samples  # never above, and the cap was used
    capped = starts(backend, "capped")
    # 8 tasks of 0.3 s, 2 at a time: at least 4 rounds.
    assert seconds(capped[-1] - capped[0]) >= 0.3 * 3 * 0.9


@BACKENDS
def test_rate_limit_and_interval_space_the_starts_across_processes(backend):
    spec = {"rated": {"rate_limit": "10/s"}, "spaced": {"interval_s": [0.15, 0.25]}}
    start_workers(backend, spec, count=2)
    backend.enqueue(
        [dict(processo="rated", payload="x", chave_externa="rated")] * 10
        + [dict(processo="spaced", payload="x", chave_externa="spaced")] * 5,
        bulk=True,
    )
    backend.wait_statuses({"sucesso": 15}, 30, "every task")
    rated = starts(backend, "rated")
    gaps = [seconds(b - a) for a, b in zip(rated, rated[1:], strict=False)]
    # One claim every 0.1 s (a late claim catches up by at most 8% of the period); a
    # handler may start a little after its claim on a busy machine: 0.1 s to spare.
    assert seconds(rated[-1] - rated[0]) >= 9 * 0.1 - 0.08 - 0.02 - 0.1, gaps
    # No 1-second window sees more than 10 starts plus the catch-up's (8% of 10), give
    # or take a start whose handler came late.
    most = max(sum(1 for t in rated if a <= t < a + datetime.timedelta(seconds=1)) for a in rated)
    assert most <= 12, gaps
    spaced = starts(backend, "spaced")
    gaps = [seconds(b - a) for a, b in zip(spaced, spaced[1:], strict=False)]
    # The spacing is between claims; a handler may start a little after its claim (a
    # busy machine), so the span of the starts is checked, with 0.1 s to spare.
    assert seconds(spaced[-1] - spaced[0]) >= 4 * 0.15 - 0.1, gaps


@BACKENDS
@pytest.mark.slow
def test_the_slot_of_a_killed_worker_is_freed_by_the_rescue_and_nothing_runs_twice(backend):
    spec = {"capped": {"max_concurrent": 1}}
    victim = start_workers(backend, spec, count=1)[0]
    hold = json.dumps({"sleep": 60, "sleep_on": [1], "started": True})
    [held] = backend.enqueue([dict(processo="capped", payload=hold, chave_externa="held")])
    wait_for(lambda: backend.started_ids() == [held], 15, "the victim to start the capped task")
    waiting = backend.enqueue(
        [dict(processo="capped", payload=json.dumps({"started": True}), chave_externa="next")] * 2
    )
    from tests.contract.workers.limits_worker import limits_worker_class

    rescuer_class = limits_worker_class(spec)
    rescuer = backend.run(
        rescuer_class(
            backend.settings(
                queue_retry_thread_interval=0.3,
                queue_base_interval_retry=RETRY_BASE_MINUTES,
                queue_concurrency=3,
            ),
            exec_table=backend.exec_table,
            started_table=backend.started_table,
            ready_file="",
        )
    )
    time.sleep(0.5)
    assert backend.started_ids() == [held]  # the slot is taken: the others wait
    victim.kill9()
    wait_for(lambda: backend.statuses().get("sucesso") == 3, 20, "the rescue and the rest")
    assert backend.statuses() == {"falha_processando": 1, "sucesso": 3}
    done = [r["task_id"] for r in backend.exec_rows()]
    rows = {r["id"]: r for r in backend.rows()}
    firsts = sorted(rows[t]["id_inicial"] or t for t in done)
    assert firsts == sorted([held, *waiting])  # each once (the killed attempt's write died)
    assert rescuer.stop() == 0


def most_at_once(spans: list[tuple]) -> int:
    """The most of ``spans`` ((start, end) pairs) running at one moment; an end and a start
    at the same moment do not overlap."""
    events = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


@BACKENDS
def test_max_concurrent_per_key_caps_each_fair_key_across_processes(backend):
    """Two worker processes, eight executors, max_concurrent_per_key=2: no fair key ever has
    more than two tasks between claim and settle (the attempt rows' started_at and
    finished_at, the database's clock); a key at its cap holds back neither the other keys
    (key "a" comes first in claim order, by prioridade) nor the unkeyed tasks (not capped)."""
    start_workers(backend, {"perkey": {"max_concurrent_per_key": 2}}, count=2, concurrency=4)
    slow = json.dumps({"sleep": 0.25})

    def task(key, prioridade, sleep=slow):
        return dict(
            processo="perkey",
            payload=sleep,
            chave_externa=key or "none",
            fair_key=key,
            prioridade=prioridade,
        )

    backend.enqueue(
        [task(None, 90, json.dumps({"sleep": 0.6}))] * 4
        + [task("a", 50)] * 10
        + [task("b", 0)] * 6
        + [task("c", 0)] * 6,
        bulk=True,
    )
    backend.wait_statuses({"sucesso": 26}, 40, "every task")
    spans: dict[str | None, list[tuple]] = {}
    for row in backend.rows("processo = 'perkey'"):
        spans.setdefault(row["fair_key"], []).append((row["started_at"], row["finished_at"]))
    assert {key: len(found) for key, found in spans.items()} == {None: 4, "a": 10, "b": 6, "c": 6}
    most = {key: most_at_once(found) for key, found in spans.items()}
    assert most["a"] == most["b"] == most["c"] == 2, spans  # never above, and the cap was used
    assert most[None] >= 3, spans  # unkeyed tasks are not capped by it
    last_of_a = max(start for start, _ in spans["a"])
    for key in "bc":
        # Started while "a" (first in claim order, at its cap) still had tasks waiting.
        assert min(start for start, _ in spans[key]) < last_of_a, spans


@pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
def test_outside_its_time_window_a_task_waits_and_starts_when_the_window_opens(backend):
    utc = datetime.timezone.utc
    opens = (datetime.datetime.now(utc) + datetime.timedelta(seconds=2.5)).replace(microsecond=0)
    closes = opens + datetime.timedelta(hours=1)
    window = f"{opens:%H:%M:%S}-{closes:%H:%M:%S} UTC"
    start_workers(backend, {"windowed": {"time_windows": window}}, count=2, concurrency=2)
    # The workers declare the window as they start, so it is set before them. On a loaded
    # machine they can take longer to start than the window takes to open: the task then
    # finds it open and must start at once, so its delay counts from its enqueue.
    enqueued = datetime.datetime.now(utc)
    backend.enqueue(
        [dict(processo="windowed", payload="x", chave_externa="windowed")]
        + [dict(processo="free", payload="x", chave_externa="free")]
    )
    wait_for(lambda: len(starts(backend, "free")) == 1, 5, "the task of another processo")
    backend.wait_statuses({"sucesso": 2}, 15, "the window to open")
    [started] = starts(backend, "windowed")
    started = started if started.tzinfo else started.replace(tzinfo=utc)
    assert started >= opens, (started, opens)  # never before the window
    late = seconds(started - max(opens, enqueued))
    # Right after it could start (a loaded machine may add a little).
    assert late < 1.5, (late, seconds(enqueued - opens))


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_workers_declaring_other_limits_for_a_processo_are_logged(backend, caplog):
    from tests.contract.workers.limits_worker import limits_worker_class

    def worker(cap: int):
        klass = limits_worker_class({"capped": {"max_concurrent": cap}})
        return klass(backend.settings(), exec_table=backend.exec_table, ready_file="")

    backend.run(worker(2))
    with caplog.at_level(logging.WARNING, logger="nsj_queue_lib"):
        backend.run(worker(3))
    warnings = [r.getMessage() for r in caplog.records if "limits disagree" in r.getMessage()]
    assert len(warnings) == 1
    assert "'capped'" in warnings[0] and "max_concurrent=3" in warnings[0]
    assert "max_concurrent=2" in warnings[0]
    [row] = backend.query(f"SELECT max_concurrent FROM {backend.table}_limits")
    assert row["max_concurrent"] == 3  # the latest declaration applies
