"""A commit group's end on MySQL/MariaDB (db/mysql/session.py): the successes written in one
UPDATE whose ids and messages are statement text, the liveness locks released in one statement;
driven through ``MysqlTaskSession`` as the group drain does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.mysql.session import MysqlTaskSession
from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.exceptions import AttemptFenced
from nsj_queue_lib.runtime.liveness import DatabaseLiveness
from nsj_queue_lib.settings import MAX_BATCH_SIZE
from tests.helpers.mysql_queue import connect, fetch_dicts, fetch_value, in_transaction, questions

pytestmark = pytest.mark.mysql

# Quotes, backslashes, a format mark, a NULL-looking word, non-ASCII, empty; one repeated.
MESSAGES = ["it's", 'a "quoted" one', "back\\slash \\\\", "%s %(x)s", "NULL", "ação ✓", "", "it's"]
TASK = dict(origem="erp", destino="fiscal", processo="emitir_nota", payload="p")


@pytest.fixture
def ops(mysql_queue, mysql_worker_conn):
    store = MysqlQueueStore(mysql_queue.table, mysql_queue.subscriber_table)
    store.bind(mysql_worker_conn)
    return MysqlTaskSession(store, DatabaseLiveness(store))


@pytest.fixture
def enqueue(mysql_kwargs, mysql_queue):
    def insert(count: int) -> list[int]:
        conn = connect(mysql_kwargs)
        try:
            client = QueueClient(conn, mysql_queue.table)
            ids = [client.insert_task(**TASK, chave_externa=f"k{i}") for i in range(count)]
            conn.commit()
            return ids
        finally:
            conn.close()

    return insert


def rows(admin, table: str) -> dict[int, tuple[str, str | None]]:
    found = fetch_dicts(admin, f"SELECT id, status, mensagem FROM {table}")
    return {r["id"]: (r["status"], r["mensagem"]) for r in found}


def locks_in_use(admin, ops: MysqlTaskSession, conn, task_ids: list[int]) -> list[bool]:
    """Whether each task's liveness lock is held, asked from another session."""
    names = [ops.store.task_lock_name(conn, task_id) for task_id in task_ids]
    return [fetch_value(admin, "SELECT IS_USED_LOCK(%s)", (name,)) is not None for name in names]


def claim(ops: MysqlTaskSession, conn, count: int):
    claims = ops.claim_group(conn, count)
    assert len(claims) == count
    return [c.task for c in claims]


@pytest.mark.parametrize("size", [5, MAX_BATCH_SIZE], ids=["small", "largest"])
def test_equal_messages_are_written_and_the_locks_released(
    ops, enqueue, mysql_worker_conn, mysql_admin, mysql_queue, size
):
    """Also for a group of QUEUE_BATCH_SIZE's largest value on MySQL/MariaDB, whose commit
    claims the next full group (COMMIT AND CHAIN, then the claim)."""
    enqueue(2 * size)
    tasks = claim(ops, mysql_worker_conn, size)
    ids = [task.id for task in tasks]
    assert locks_in_use(mysql_admin, ops, mysql_worker_conn, ids) == [True] * size
    next_group = ops.settle_group(
        mysql_worker_conn, SimpleNamespace(written=[(task, "ok") for task in tasks], tx=None), size
    )
    found = rows(mysql_admin, mysql_queue.table)
    assert {i: found[i] for i in ids} == {i: ("sucesso", "ok") for i in ids}
    assert locks_in_use(mysql_admin, ops, mysql_worker_conn, ids) == [False] * size
    held = [c.task.id for c in next_group]
    assert len(held) == size and not set(held) & set(ids)
    assert locks_in_use(mysql_admin, ops, mysql_worker_conn, held) == [True] * size
    assert all(found[i] == ("processando", None) for i in held)
    ops.store.rollback(mysql_worker_conn)


def test_different_messages_each_reach_their_task(
    ops, enqueue, mysql_worker_conn, mysql_admin, mysql_queue
):
    enqueue(len(MESSAGES) + 2)
    tasks = claim(ops, mysql_worker_conn, len(MESSAGES))
    next_group = ops.settle_group(
        mysql_worker_conn,
        SimpleNamespace(written=list(zip(tasks, MESSAGES, strict=True)), tx=None),
        2,
    )
    found = rows(mysql_admin, mysql_queue.table)
    assert [found[task.id] for task in tasks] == [("sucesso", m) for m in MESSAGES]
    ids = [task.id for task in tasks]
    assert locks_in_use(mysql_admin, ops, mysql_worker_conn, ids) == [False] * len(ids)
    # The next group, claimed after the commit, holds its locks.
    held = [c.task.id for c in next_group]
    assert locks_in_use(mysql_admin, ops, mysql_worker_conn, held) == [True, True]
    ops.store.rollback(mysql_worker_conn)


def test_backslashes_survive_no_backslash_escapes(
    ops, enqueue, mysql_worker_conn, mysql_admin, mysql_queue
):
    # The messages go through the connection's escaping, which follows its sql_mode.
    with mysql_worker_conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
    enqueue(3)
    tasks = claim(ops, mysql_worker_conn, 3)
    messages = ["back\\slash", "it's \\' not closed", "back\\slash"]
    ops.settle_group(
        mysql_worker_conn,
        SimpleNamespace(written=list(zip(tasks, messages, strict=True)), tx=None),
        0,
    )
    found = rows(mysql_admin, mysql_queue.table)
    assert [found[task.id][1] for task in tasks] == messages


def test_tasks_the_first_savepoint_wrote_are_skipped(
    ops, enqueue, mysql_worker_conn, mysql_admin, mysql_queue
):
    enqueue(3)
    tasks = claim(ops, mysql_worker_conn, 3)
    ids = [task.id for task in tasks]
    # Written earlier by the transaction's first savepoint (the group's tx says one).
    with mysql_admin.cursor() as cur:
        sql = f"UPDATE {mysql_queue.table} SET status = %s, mensagem = %s WHERE id = %s"
        cur.execute(sql, ("sucesso", "first", ids[0]))
    written = [(tasks[0], "again"), (tasks[1], "x"), (tasks[2], "y")]
    group = SimpleNamespace(tx=(ids[0], 1), written=written)
    ops.settle_group(mysql_worker_conn, group, 0)
    assert rows(mysql_admin, mysql_queue.table) == {
        ids[0]: ("sucesso", "first"),
        ids[1]: ("sucesso", "x"),
        ids[2]: ("sucesso", "y"),
    }
    assert locks_in_use(mysql_admin, ops, mysql_worker_conn, ids) == [False] * 3


def test_a_task_no_longer_processando_fences_the_group_commit(
    ops, enqueue, mysql_worker_conn, mysql_admin, mysql_queue
):
    enqueue(3)
    tasks = claim(ops, mysql_worker_conn, 3)
    ids = [task.id for task in tasks]
    with mysql_admin.cursor() as cur:  # rescued by another worker meanwhile
        sql = f"UPDATE {mysql_queue.table} SET status = %s, mensagem = %s WHERE id = %s"
        cur.execute(sql, ("falha_processando", "rescued", ids[1]))
    with pytest.raises(AttemptFenced):
        ops.settle_group(
            mysql_worker_conn, SimpleNamespace(written=[(task, "ok") for task in tasks], tx=None), 0
        )
    mysql_worker_conn.rollback()  # what the group drain does (its connection closed)
    assert rows(mysql_admin, mysql_queue.table) == {
        ids[0]: ("processando", None),
        ids[1]: ("falha_processando", "rescued"),
        ids[2]: ("processando", None),
    }


def test_a_group_end_is_six_statements_with_the_next_claim(
    ops, enqueue, mysql_worker_conn, mysql_admin, mysql_queue
):
    enqueue(4)
    tasks = claim(ops, mysql_worker_conn, 2)
    before = questions(mysql_worker_conn)
    next_group = ops.settle_group(
        mysql_worker_conn, SimpleNamespace(written=[(task, "ok") for task in tasks], tx=None), 2
    )
    # The successes, the release of their waiting children (nsj_queue_lib/workflow/), the
    # locks, COMMIT AND CHAIN (the claim's transaction opened with the commit), the claim
    # limit, the CALL; questions() counts itself once.
    assert questions(mysql_worker_conn) - before - 1 == 6
    assert len(next_group) == 2 and in_transaction(mysql_worker_conn)
    statuses = {i: status for i, (status, _) in rows(mysql_admin, mysql_queue.table).items()}
    assert sorted(statuses.values()) == ["processando"] * 2 + ["sucesso"] * 2
    ops.store.rollback(mysql_worker_conn)
