"""The read commands: ``status``, ``tasks``, ``show ID``."""

from __future__ import annotations

import argparse
import datetime
import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.cli.config import Config
from nsj_queue_lib.cli.errors import EXIT_OK, NothingToDo
from nsj_queue_lib.cli.output import cell, duration, table, write, write_json
from nsj_queue_lib.cli.session import open_session
from nsj_queue_lib.db.driver import Driver
from nsj_queue_lib.db.inspection import TaskFilter
from nsj_queue_lib.db.pause_store import BreakerStore, PauseStore
from nsj_queue_lib.db.subscriber_breaker_store import subscriber_breakers
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.notify.checked import DEAF_REASON
from nsj_queue_lib.runtime.registry import STALE_SECONDS

MESSAGE_WIDTH = 60
PAYLOAD_WIDTH = 200
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)([smhd])\Z")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


# -- status ------------------------------------------------------------------------------


def _summaries(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per processo and in total: counts by status, oldest ready age, recent failures."""
    by_processo: dict[Any, dict[str, Any]] = {}
    total = _empty_summary(None)
    for row in rows:
        entry = by_processo.setdefault(row["processo"], _empty_summary(row["processo"]))
        for target in (entry, total):
            counts = target["counts"]
            counts[row["status"]] = counts.get(row["status"], 0) + row["tasks"]
            target["tasks"] += row["tasks"]
            target["failed_24h"] += row["failed_24h"]
            target["dead_24h"] += row["dead_24h"]
            age = row["oldest_ready_seconds"]
            if age is not None:
                target["oldest_ready_seconds"] = max(target["oldest_ready_seconds"] or 0.0, age)
    entries = sorted(by_processo.values(), key=lambda e: (e["processo"] is None, e["processo"]))
    total.pop("processo")
    return entries, total


def _empty_summary(processo: str | None) -> dict[str, Any]:
    return {
        "processo": processo,
        "counts": {status: 0 for status in model.STATUSES},
        "tasks": 0,
        "oldest_ready_seconds": None,
        "failed_24h": 0,
        "dead_24h": 0,
    }


def _wakeups(driver: Driver) -> dict[str, str]:
    """How a worker with these settings is woken. nsjq cannot ask the workers, so it tries
    LISTEN itself through the same connection settings (a pooler in front makes it deaf)."""
    mode = driver.wakeup_mode()
    if mode == "listen" and not driver.listen_receives():
        return {"mode": "poll", "reason": DEAF_REASON}
    if mode == "poll" and driver.settings.queue_wakeup == "poll":
        return {"mode": mode, "reason": "QUEUE_WAKEUP=poll"}
    return {"mode": mode}


class _Beside(threading.Thread):
    """``work()`` on a thread of its own, started at once; ``outcome()`` waits for it and
    returns what it returned, or raises what it raised."""

    def __init__(self, work: Callable[[], Any]):
        super().__init__(daemon=True)
        self._work = work
        self._result: Any = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._result = self._work()
        except BaseException as exc:  # noqa: BLE001 - raised again by outcome(), in the command's thread
            self._error = exc

    def outcome(self) -> Any:
        self.join()
        if self._error is not None:
            raise self._error
        return self._result


def _live_workers(session: Any) -> list[dict[str, Any]] | None:
    """The workers seen recently (runtime/registry.py); None where the workers table is
    missing (a schema before db_gen --upgrade)."""
    try:
        workers: list[dict[str, Any]] = session.store.live_workers(session.conn, STALE_SECONDS)
        return workers
    except DatabaseError:
        session.conn.rollback()
        return None


def _unhandled(processos: list[dict[str, Any]], workers: list[dict[str, Any]]) -> list[str]:
    """The processos with ready tasks that no live worker claims (none: a worker claims
    every processo)."""
    claimed: set[str] = set()
    for worker in workers:
        if worker["processos"] is None:
            return []
        claimed.update(json.loads(worker["processos"]))
    return [
        e["processo"]
        for e in processos
        if e["counts"].get(model.PENDENTE) and e["processo"] not in claimed
    ]


def _workers_lines(workers: list[dict[str, Any]] | None, unhandled: list[str]) -> str:
    if workers is None:
        return "workers: unknown (no workers table: db_gen --upgrade creates it)"
    names = ", ".join(w["worker"] for w in workers) or "none seen"
    line = f"workers: {len(workers)} ({names})"
    if unhandled:
        line += "\nno worker handles these: " + ", ".join(str(p) for p in unhandled)
    return line


def status(args: argparse.Namespace, config: Config) -> int:
    with open_session(config) as session:
        # The LISTEN probe's two connections and round trips run beside the reads below.
        probe = _Beside(lambda: _wakeups(session.driver))
        try:
            rows = session.store.summary(session.conn)
            running = session.store.running(session.conn, args.limit)
            workers = _live_workers(session)
            pauses = _pauses(session, config)
        finally:
            probe.join()  # its connections closed before the command ends, whatever happens
        wakeups: dict[str, str] = probe.outcome()
        dialect = session.driver.name
    processos, total = _summaries(rows)
    unhandled = _unhandled(processos, workers or [])
    if args.json:
        write_json(
            {
                "queue": config.queue_table,
                "dialect": dialect,
                "wakeups": wakeups,
                "processos": processos,
                "total": total,
                "running": running,
                "workers": workers,
                "unhandled_processos": unhandled,
                "paused": None if pauses is None else pauses["paused"],
                "circuit_breakers": None if pauses is None else pauses["breakers"],
                "subscriber_circuit_breakers": (
                    None if pauses is None else pauses["subscriber_breakers"]
                ),
            }
        )
        return EXIT_OK
    reason = f" ({wakeups['reason']})" if "reason" in wakeups else ""
    write(
        f"queue {config.queue_table} ({dialect})\nwake-ups: {wakeups['mode']}{reason}\n"
        f"{_workers_lines(workers, unhandled)}\n{_pause_lines(pauses)}\n"
        f"{_summary_table(processos, total)}"
    )
    _write_running(running, args.limit)
    return EXIT_OK


def _pauses(session: Any, config: Config) -> dict[str, Any] | None:
    """The pauses in force (QueueClient.paused) and the circuit breakers with failures
    or open; None where there are none to read (SingleStore, or a table db_gen
    --upgrade has not reached)."""
    try:
        breakers = BreakerStore(session.conn, config.queue_table).breakers(session.conn)
        fleet = {
            "paused": [
                p.as_dict()
                for p in PauseStore(session.conn, config.queue_table).paused(session.conn)
            ],
            "breakers": [b.as_dict() for b in breakers],
        }
    except (NotImplementedError, DatabaseError):
        rollback = getattr(session.conn, "rollback", None)
        if rollback is not None:
            rollback()
        return None
    fleet["subscriber_breakers"] = subscriber_breakers(session.conn, config.queue_table)
    return fleet


def _pause_lines(fleet: dict[str, Any] | None) -> str:
    """``PAUSED: ...`` for each pause in force and ``CIRCUIT BREAKER ...`` for each breaker
    with failures or open (one line each), or nothing."""
    lines = []
    for breaker in (fleet or {}).get("breakers", ()):
        state = breaker["state"].replace("_", "-")
        until = f" until {breaker['until']}" if breaker["state"] == "open" else ""
        lines.append(
            f"CIRCUIT BREAKER of processo {breaker['processo']}: {state}{until} "
            f"({breaker['failures']} consecutive failures)\n"
        )
    for breaker in (fleet or {}).get("subscriber_breakers", ()):
        state = breaker["state"].replace("_", "-")
        until = f" until {breaker['until']}" if breaker["state"] == "open" else ""
        lines.append(
            f"CIRCUIT BREAKER of webhook subscriber {breaker['subscriber']}: {state}{until} "
            f"({breaker['failures']} consecutive failures)\n"
        )
    for pause in (fleet or {}).get("paused", ()):
        what = "the whole queue" if pause["processo"] is None else f"processo {pause['processo']}"
        until = f" until {pause['until']}" if pause["until"] else " until resumed"
        lines.append(f"PAUSED: {what}{until}\n")
    return "".join(lines)


def _summary_table(processos: list[dict[str, Any]], total: dict[str, Any]) -> str:
    """One line per processo and the TOTAL line: its counts per status, then its ages."""
    statuses = list(total["counts"])
    headers = ["processo", *statuses, "tasks", "oldest_ready", "failed_24h", "dead_24h"]
    lines = [
        [
            entry.get("processo", "TOTAL"),
            *(entry["counts"].get(s, 0) for s in statuses),
            entry["tasks"],
            duration(entry["oldest_ready_seconds"]),
            entry["failed_24h"],
            entry["dead_24h"],
        ]
        for entry in [*processos, dict(total, processo="TOTAL")]
    ]
    return table(headers, lines)


def _write_running(running: list[dict[str, Any]], limit: int) -> None:
    """How many tasks run (``limit`` of them at most were read), and a table of them."""
    write(f"\nrunning: {len(running)}" + (f" (first {limit})" if len(running) >= limit else ""))
    if running:
        write(
            table(
                ["id", "task", "processo", "tentativa", "data_hora", "age"],
                [
                    [
                        r["id"],
                        r["id_inicial"] or r["id"],
                        r["processo"],
                        r["tentativa"],
                        r["data_hora"],
                        duration(r["age_seconds"]),
                    ]
                    for r in running
                ],
            )
        )


# -- tasks -------------------------------------------------------------------------------


def parse_time(text: str) -> datetime.datetime:
    """``30m``, ``2h``, ``1d`` (that long ago) or an ISO 8601 date/time (UTC unless it says
    otherwise), as an aware datetime; argparse's ``type``."""
    now = datetime.datetime.now(datetime.timezone.utc)
    relative = _RELATIVE.match(text.strip())
    if relative:
        amount, unit = relative.groups()
        return now - datetime.timedelta(seconds=float(amount) * _UNIT_SECONDS[unit])
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: use 30m, 2h, 1d or an ISO date/time such as 2024-05-01T12:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment


def _statuses(values: Sequence[str] | None) -> list[str]:
    """``--status a,b --status c``: the statuses, in order, once each."""
    found: list[str] = []
    for value in values or ():
        for part in value.split(","):
            if part.strip() and part.strip() not in found:
                found.append(part.strip())
    return found


def _task_columns(row: dict[str, Any]) -> list[Any]:
    return [
        row["id"],
        row["id_inicial"] or row["id"],
        row["processo"],
        row["status"],
        row["tentativa"],
        row["dead"],
        row["data_hora"],
        row["chave_externa"],
        cell(row["mensagem"], MESSAGE_WIDTH) if row["mensagem"] else None,
    ]


_TASK_HEADERS = [
    "id",
    "task",
    "processo",
    "status",
    "tentativa",
    "dead",
    "data_hora",
    "chave_externa",
    "mensagem",
]


def tasks(args: argparse.Namespace, config: Config) -> int:
    filters = TaskFilter(
        statuses=_statuses(args.status),
        processo=args.processo,
        chave_externa=args.chave_externa,
        since=args.since,
        until=args.until,
        all_attempts=args.all_attempts,
    )
    offset = (args.page - 1) * args.limit
    with open_session(config) as session:
        # One row more than the page says whether another page follows.
        rows = session.store.list_tasks(session.conn, filters, args.limit + 1, offset)
    has_more = len(rows) > args.limit
    rows = rows[: args.limit]
    if args.json:
        write_json({"page": args.page, "limit": args.limit, "has_more": has_more, "tasks": rows})
        return EXIT_OK
    if not rows:
        write("no tasks" + (f" on page {args.page}" if args.page > 1 else ""))
        return EXIT_OK
    write(table(_TASK_HEADERS, [_task_columns(r) for r in rows]))
    more = f"; next: --page {args.page + 1}" if has_more else ""
    write(f"\npage {args.page}, {len(rows)} task(s), {args.limit} per page{more}")
    return EXIT_OK


# -- show --------------------------------------------------------------------------------


def split_chain(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A task's attempts (from its first, by id) and its dead letter's attempts."""
    first = rows[0]["id"]
    attempts = [r for r in rows if r["id"] == first or r["id_inicial"] == first]
    dead_letter = [r for r in rows if r not in attempts]
    return attempts, dead_letter


_ATTEMPT_HEADERS = [
    "id",
    "tentativa",
    "status",
    "data_hora",
    "started_at",
    "finished_at",
    "worker",
    "proxima_tentativa",
    "reenfileirado",
    "estouro_tentativas",
    "mensagem",
]


def _attempt_columns(row: dict[str, Any]) -> list[Any]:
    return [
        row["id"],
        row["tentativa"],
        row["status"],
        row["data_hora"],
        row["started_at"],
        row["finished_at"],
        row["worker"],
        row["proxima_tentativa"],
        row["reenfileirado"],
        row["estouro_tentativas"],
        row["mensagem"],
    ]


def show(args: argparse.Namespace, config: Config) -> int:
    with open_session(config) as session:
        rows = session.store.task_chain(session.conn, args.id)
    if not rows:
        raise NothingToDo(f"task {args.id} not found in {config.queue_table}")
    attempts, dead_letter = split_chain(rows)
    first, latest = attempts[0], attempts[-1]
    if args.json:
        write_json(
            {
                "task": first["id"],
                "status": latest["status"],
                "attempts": attempts,
                "dead_letter": dead_letter,
            }
        )
        return EXIT_OK
    facts = [f"processo {cell(first['processo'])}", f"chave_externa {cell(first['chave_externa'])}"]
    if first["dead"]:
        facts.append(f"dead letter of task {cell(first['live_id'])}")
    write(
        f"task {first['id']} ({', '.join(facts)}): {latest['status']}, {len(attempts)} attempt(s)"
    )
    write(table(_ATTEMPT_HEADERS, [_attempt_columns(r) for r in attempts]))
    if dead_letter:
        write(f"\ndead letter: task {dead_letter[0]['id']}, {dead_letter[-1]['status']}")
        write(table(_ATTEMPT_HEADERS, [_attempt_columns(r) for r in dead_letter]))
    write(f"\npayload: {cell(first.get('payload'), PAYLOAD_WIDTH)}")
    return EXIT_OK
