-- Commit groups that hold their tasks unwritten (QUEUE_ONE_WRITE;
-- db/postgres/held_groups.py, docs/internals/one-write.md).

-- name: open_group
-- A group's row, written on the worker's ledger connection (autocommit) before
-- the group's first handler runs.
INSERT INTO {groups_table} (id, worker, task_ids) VALUES ($1, $2, $3::bigint[])

-- name: end_group
-- In the group's transaction, with its commit: the group's row goes.
DELETE FROM {groups_table} AS g WHERE g.id = $1 RETURNING g.id

-- name: write_held
-- In the group's transaction: held tasks that need more than their outcome (a
-- failure's record, a durable step's fence) or go on after a commit in the
-- middle of the group, written 'processando' as a two-write claim writes them.
-- The rows are this transaction's, locked since its claim. Sent after a
-- transaction-local enable_seqscan = off: planned generically on a table of a
-- few thousand rows, the array's look-up read the table whole.
UPDATE {queue_table} AS t
SET status = 'processando',
    started_at = coalesce(t.started_at, nullif(current_setting('nsjq.held_at', true), '')::timestamptz),
    worker = coalesce(t.worker, nullif(current_setting('nsjq.held_by', true), ''))
WHERE {hot_t}t.id = ANY($1::bigint[]) AND t.status = 'pendente'
RETURNING t.id

-- name: groups_left
-- The retry service's look at the groups' rows, oldest first.
SELECT id, worker, task_ids, started_at FROM {groups_table} ORDER BY id LIMIT %(limit)s

-- name: write_abandoned
-- A group's tasks still 'pendente' and locked by no transaction: its worker died
-- (or lost its connection) after the group's row was written. Written
-- 'processando' as their claim would have, with no liveness lock held: the
-- rescue (find_orphans) records their attempt as failed. A task another
-- worker runs now is locked by that worker: left alone.
WITH free AS (
    SELECT t.id FROM {queue_table} AS t
    WHERE {hot_t}t.id = ANY(%(ids)s::bigint[]) AND t.status = 'pendente'
    FOR UPDATE OF t SKIP LOCKED
), written AS (
    UPDATE {queue_table} AS t
    SET status = 'processando', started_at = coalesce(t.started_at, %(started_at)s),
        worker = coalesce(t.worker, %(worker)s)
    FROM free
    WHERE {hot_t}t.id = free.id
    RETURNING t.id
)
SELECT count(*) FROM written

-- name: group_still_held
-- Whether a task of the group is still 'pendente' (then locked: a live group, or
-- another worker running it): its row stays until then.
SELECT EXISTS (
    SELECT 1 FROM {queue_table} AS t
    WHERE {hot_t}t.id = ANY(%(ids)s::bigint[]) AND t.status = 'pendente'
)

-- name: remove_group
DELETE FROM {groups_table} WHERE id = %(id)s
