"""Dependencies between tasks: inserting a child ``after`` its parents, and what a
parent's end does to its children.

A child's parents are known by their first attempts' ids (``id_inicial``): a
retry is the same parent. At insert, each parent's latest attempt is read with a
row lock held until the caller's commit, so a worker settling that parent
meanwhile either finishes first (the child sees the parent settled and does not
wait for it) or waits for the child's commit (and then sees its edges). Parents
must exist when the child is inserted, so a cycle cannot be written: a task can
only name tasks older than itself. An unknown id is refused before anything is
written.

Success releases children inside the claim and settle routines
(``db/<dialect>/workflow_tables.sql``: no query per child). A parent that fails
for good (its dead letter enqueued, or failed with nothing after) or ends
'cancelada' cancels its waiting children ('cancelada', a ``mensagem`` naming
it), and theirs in turn; a child inserted with ``on_parent_failure="run"``
counts such a parent as finished instead. That is ``parents_failed``, called by
the worker where the failure is written, and by ``cancel_task``.

Each edge (``<queue>_parents`` row) is counted once: its ``settled`` flag flips
when its parent's end is counted (or is set at insert for a parent that had
finished), and only edges that flip count. A parent that failed for good and is
then retried by hand (``retry_task``) keeps its edges settled: its cancelled
children stay cancelled, and its "run" children, which counted it as finished,
do not wait for the retry nor count it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db.workflow_store import WorkflowStore, WorkflowUnsupported
from nsj_queue_lib.exceptions import NotFoundError

AGUARDANDO = model.AGUARDANDO
ON_PARENT_FAILURE = ("cancel", "run")
# How many times a parent's state is read again while its next attempt is being
# inserted by a worker (its latest attempt read 'falha' with reenfileirado).
READ_ATTEMPTS = 5


def check_after(after: Any, on_parent_failure: Any) -> list[int] | None:
    """``after`` as a list of distinct ids in the given order (None: no parents)."""
    if on_parent_failure not in ON_PARENT_FAILURE:
        raise ValueError(f"on_parent_failure must be 'cancel' or 'run', got {on_parent_failure!r}")
    if after is None:
        return None
    if isinstance(after, (str, bytes)) or not isinstance(after, Iterable):
        raise TypeError("after must be a list of task ids")
    ids: list[int] = []
    for value in after:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"after: task ids are ints, got {type(value).__name__}")
        if value not in ids:
            ids.append(value)
    return ids


def parent_outcome(state: dict[str, Any]) -> str | None:
    """'sucesso', 'failed' (dead-lettered, failed for good or 'cancelada'), or None while
    the parent has work ahead of it."""
    status = state["status"]
    if status == model.SUCESSO:
        return model.SUCESSO
    if status == model.CANCELADA or state["estouro_tentativas"]:
        return "failed"
    if status in (model.FALHA, model.FALHA_PROCESSANDO) and not state["reenfileirado"]:
        return "failed"  # a failure with nothing after it (a dead letter's last attempt)
    return None


def read_parents(
    wstore: WorkflowStore, conn: Any, after: Sequence[int]
) -> list[tuple[int, int, str | None]]:
    """(given id, first attempt id, outcome) per parent, each row-locked; ``NotFoundError``
    naming the unknown ids (nothing written). The reads run again, all of them, where a
    parent's row moved meanwhile (``WorkflowStore.retrying_moved_rows``)."""
    found, unknown = wstore.retrying_moved_rows(conn, lambda: _read_parents(wstore, conn, after))
    if unknown:
        raise NotFoundError(
            f"after: no task {', '.join(map(str, unknown))} in {wstore.queue_table}"
        )
    return found


def _read_parents(
    wstore: WorkflowStore, conn: Any, after: Sequence[int]
) -> tuple[list[tuple[int, int, str | None]], list[int]]:
    found: list[tuple[int, int, str | None]] = []
    unknown: list[int] = []
    for task_id in after:
        state = None
        for _ in range(READ_ATTEMPTS):
            state = wstore.parent_state(conn, task_id)
            if state is None or not state["reenfileirado"]:
                break  # else its next attempt was being inserted: read it again
        if state is None:
            unknown.append(task_id)
            continue
        found.append((task_id, state["first_id"], parent_outcome(state)))
    return found, unknown


def insert_child(
    wstore: WorkflowStore,
    conn: Any,
    insert: Any,
    parents: Sequence[tuple[int, int, str | None]],
    on_parent_failure: str,
    insert_waiting: Callable[[], int] | None = None,
) -> int:
    """Insert a task (``insert()``, returning its id) after ``parents`` (``read_parents``'s
    answer, read in this transaction), in the caller's transaction; returns its id.
    ``insert_waiting()``, where the store has it, inserts the task 'aguardando' at once."""
    # Per parent, not per id given: two ids of one task (an attempt and its retry) are
    # one edge, counted once.
    outcomes = {first: outcome for _, first, outcome in parents}
    edges = [(first, outcomes[first] is not None) for first in sorted(outcomes)]
    pending = sum(1 for outcome in outcomes.values() if outcome is None)
    failed = [given for given, _, outcome in parents if outcome == "failed"]
    if failed and on_parent_failure == "cancel":
        task_id: int = insert()
        wstore.add_child(conn, task_id, edges, 0, on_parent_failure)
        wstore.set_new_status(conn, task_id, model.CANCELADA, failed_parent_message(failed[0]))
        return task_id
    if pending and insert_waiting is not None:
        task_id = insert_waiting()
        wstore.add_child(conn, task_id, edges, pending, on_parent_failure)
        return task_id
    task_id = insert()
    wstore.add_child(conn, task_id, edges, pending, on_parent_failure)
    if pending:
        wstore.set_new_status(conn, task_id, AGUARDANDO, None)
    return task_id


def failed_parent_message(parent_id: int) -> str:
    return f"cancelled: parent task {parent_id} did not succeed (dead-lettered or cancelled)"


def parents_failed(wstore: WorkflowStore, conn: Any, attempt_ids: Sequence[int]) -> list[int]:
    """These attempts' tasks ended without success: their waiting children are cancelled
    (and theirs in turn), or counted down and released with ``on_parent_failure="run"``,
    in the caller's transaction. The ids of the children cancelled."""
    frontier = [first for first in (wstore.first_id(conn, a) for a in attempt_ids) if first]
    cancelled: list[int] = []
    released = False
    while frontier:
        rows = wstore.dependents(conn, frontier)
        # Each edge counts once: a parent retried by hand after it failed for good, or
        # a failure written twice, finds its edges settled.
        wstore.settle_edges(conn, frontier)
        finished: dict[int, list[int]] = {}
        for parent, child, mode in rows:
            if mode == "run":
                finished.setdefault(child, []).append(parent)
        for child, parents in sorted(finished.items()):
            released = wstore.count_down(conn, child, parents) or released
        frontier = []
        for parent, child, mode in rows:
            if mode == "cancel" and wstore.cancel_waiting(
                conn, child, failed_parent_message(parent)
            ):
                frontier.append(child)
        cancelled.extend(frontier)
    if released:
        wstore.notify_ready(conn)
    return cancelled


def worker_store(store: Any, conn: Any) -> WorkflowStore | None:
    """The dependencies of a worker's queue store (None where there are none: SingleStore,
    the in-memory queue of ``nsj_queue_lib.testing``)."""
    queue_table = getattr(store, "queue_table", None)
    if not isinstance(queue_table, str):
        return None
    try:
        return WorkflowStore.for_store(store, queue_table)
    except WorkflowUnsupported:
        return None


def after_failure(store: Any, conn: Any, attempt_id: int) -> None:
    """A worker wrote the attempt's end without success, for good (dead letter, final
    failure, 'cancelada'): its waiting children follow, in the same transaction."""
    wstore = worker_store(store, conn)
    if wstore is not None:
        parents_failed(wstore, conn, [attempt_id])


def after_successes(
    store: Any, conn: Any, attempt_ids: Sequence[int] = (), first_ids: Sequence[int] | None = None
) -> None:
    """Attempts just written 'sucesso' by a statement outside the claim and settle routines
    (MySQL's group end, a completion under the socket server's lock): their children
    released in the same transaction. ``first_ids``, the tasks' first attempts' ids (which
    the edges name), where the caller has them: then the attempts' rows are not read (a
    success has just moved them out of a partitioned table's hot partition, where a read
    by id alone probes every partition)."""
    wstore = worker_store(store, conn)
    if wstore is None:
        return
    if first_ids is not None:
        wstore.release_after_success(conn, sorted(set(first_ids)))
    else:
        wstore.release_after_success_of_attempts(conn, sorted(set(attempt_ids)))
