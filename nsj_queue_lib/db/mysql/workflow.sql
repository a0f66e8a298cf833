-- Named queries of dependencies between tasks (nsj_queue_lib/workflow/), as
-- PostgreSQL's workflow.sql. Reads that decide are locking reads: they see the
-- latest committed rows whatever the caller's snapshot (REPEATABLE READ).

-- name: parent_state
-- The latest attempt of the task the id belongs to, locked until the caller's
-- commit (see PostgreSQL's). Two steps: MySQL reads a table an UPDATE's own
-- subquery names only without a lock.
SELECT t.id, COALESCE(t.id_inicial, t.id), t.status, t.reenfileirado, t.estouro_tentativas, t.dead
FROM {queue_table} AS t
WHERE t.id = COALESCE(
    (SELECT MAX(a.id) FROM {queue_table} AS a
     WHERE a.id_inicial = (SELECT COALESCE(f.id_inicial, f.id) FROM {queue_table} AS f WHERE f.id = %(id)s)),
    (SELECT COALESCE(f.id_inicial, f.id) FROM {queue_table} AS f WHERE f.id = %(id)s)
)
LOCK IN SHARE MODE

-- name: add_edge
INSERT INTO {parents_table} (parent_id, child_id) VALUES (%(parent)s, %(child)s)

-- name: add_waiting
INSERT INTO {waiting_table} (child_id, pending_parents, on_parent_failure)
VALUES (%(child)s, %(pending)s, %(on_parent_failure)s)

-- name: set_new_status
UPDATE {queue_table}
SET mensagem = %(mensagem)s,
    finished_at = CASE WHEN %(status)s = 'cancelada' THEN NOW(6) END,
    status = %(status)s
WHERE id = %(id)s

-- name: first_id
SELECT COALESCE(id_inicial, id) FROM {queue_table} WHERE id = %(id)s

-- name: dependents
SELECT p.parent_id, p.child_id, w.on_parent_failure
FROM {parents_table} AS p
JOIN {waiting_table} AS w ON w.child_id = p.child_id
WHERE p.parent_id IN %(ids)s
ORDER BY p.child_id, p.parent_id
FOR UPDATE

-- name: count_down
UPDATE {waiting_table} SET pending_parents = pending_parents - %(n)s WHERE child_id = %(child)s

-- name: release_child
UPDATE {queue_table} AS t
SET t.status = 'pendente'
WHERE t.id = %(child)s AND t.status = 'aguardando'
  AND EXISTS (
      SELECT 1 FROM {waiting_table} AS w WHERE w.child_id = %(child)s AND w.pending_parents <= 0
  )

-- name: cancel_waiting
UPDATE {queue_table}
SET mensagem = %(mensagem)s, finished_at = NOW(6), status = 'cancelada'
WHERE id = %(child)s AND status = 'aguardando'

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

-- name: notify_ready
DO 0

-- name: children_of_attempts
-- children_of for attempts' ids (their tasks' first attempts with children).
SELECT DISTINCT p.parent_id
FROM {queue_table} AS t
JOIN {parents_table} AS p ON p.parent_id = COALESCE(t.id_inicial, t.id)
WHERE t.id IN %(ids)s
LOCK IN SHARE MODE
