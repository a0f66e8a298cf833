-- Named queries of dependencies between tasks (nsj_queue_lib/workflow/), as
-- PostgreSQL's workflow.sql. Reads that decide are locking reads, which read the
-- latest committed rows whatever the caller's snapshot (REPEATABLE READ). A
-- parent's state is by_task_id.sql's (db/latest_attempt.py), which
-- locks no gap. {hot} / {hot_t} pin a statement of an unfinished row to the hot
-- partition on the partitioned layout (db/layout_cache.py), else empty.

-- name: add_edge
-- settled: the parent had already finished when the child was inserted.
INSERT INTO {parents_table} (parent_id, child_id, settled)
VALUES (%(parent)s, %(child)s, %(settled)s)

-- name: add_waiting
INSERT INTO {waiting_table} (child_id, pending_parents, on_parent_failure)
VALUES (%(child)s, %(pending)s, %(on_parent_failure)s)

-- name: set_new_status
UPDATE {queue_table}
SET mensagem = %(mensagem)s,
    finished_at = CASE WHEN %(status)s = 'cancelada' THEN NOW(6) END,
    status = %(status)s
WHERE {hot}id = %(id)s

-- name: first_id
SELECT COALESCE(id_inicial, id) FROM {queue_table} WHERE id = %(id)s

-- name: dependents
-- The waiting children of these parents whose edge is not settled yet, their
-- counts and edges locked until settle_edges flips exactly these edges.
SELECT p.parent_id, p.child_id, w.on_parent_failure
FROM {parents_table} AS p
JOIN {waiting_table} AS w ON w.child_id = p.child_id
WHERE p.parent_id IN %(ids)s AND NOT p.settled
ORDER BY p.child_id, p.parent_id
FOR UPDATE

-- name: settle_edges
UPDATE {parents_table} SET settled = TRUE WHERE parent_id IN %(ids)s AND NOT settled

-- name: count_down
UPDATE {waiting_table} SET pending_parents = pending_parents - %(n)s WHERE child_id = %(child)s

-- name: release_child
UPDATE {queue_table} AS t
SET t.status = 'pendente'
WHERE {hot_t}t.id = %(child)s AND t.status = 'aguardando'
  AND EXISTS (
      SELECT 1 FROM {waiting_table} AS w WHERE w.child_id = %(child)s AND w.pending_parents <= 0
  )

-- name: cancel_waiting
UPDATE {queue_table}
SET mensagem = %(mensagem)s, finished_at = NOW(6), status = 'cancelada'
WHERE {hot}id = %(child)s AND status = 'aguardando'

-- name: parents_of
SELECT p.parent_id,
       COALESCE(
           (SELECT MAX(a.id) FROM {queue_table} AS a WHERE a.id_inicial = p.parent_id),
           p.parent_id
       ) AS latest_id
FROM {parents_table} AS p
WHERE p.child_id = %(child)s
ORDER BY p.parent_id

-- name: children_of
-- Which of these settled tasks (first attempts' ids) have children: a locking
-- read, which sees a child committed after the caller's snapshot.
SELECT DISTINCT parent_id FROM {parents_table} WHERE parent_id IN %(ids)s LOCK IN SHARE MODE

-- name: release_children
CALL {release_function}(%(parent)s)

-- name: children_to_lock
-- The children the settlement of these parents counts down (a locking read: the
-- latest edges, whatever the caller's snapshot).
SELECT DISTINCT child_id FROM {parents_table} WHERE parent_id IN %(ids)s AND NOT settled
LOCK IN SHARE MODE

-- name: lock_children
-- Their counts, locked before the release procedure's calls (one per parent)
-- in one id order: an IN list of constants is a range scan of the primary
-- key in ascending order.
SELECT child_id FROM {waiting_table} WHERE child_id IN %(ids)s FOR UPDATE

-- name: notify_ready
DO 0

-- name: children_of_attempts
-- children_of for attempts' ids (their tasks' first attempts with children).
SELECT DISTINCT p.parent_id
FROM {queue_table} AS t
JOIN {parents_table} AS p ON p.parent_id = COALESCE(t.id_inicial, t.id)
WHERE t.id IN %(ids)s
LOCK IN SHARE MODE
