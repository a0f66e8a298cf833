-- Named queries of durable steps and waits: PostgreSQL's steps.sql, these
-- replacing its queries by name. Reads that decide are locking reads: they see
-- the latest committed rows whatever the caller's snapshot (REPEATABLE READ).
-- base: postgres

-- name: count_prefixed
SELECT COUNT(*) FROM {steps_table}
WHERE task_id = %(task)s AND LEFT(name, CHAR_LENGTH(%(prefix)s)) = %(prefix)s

-- name: own_attempt
SELECT status FROM {queue_table} WHERE id = %(id)s FOR UPDATE

-- name: save_step
INSERT INTO {steps_table} (task_id, name, result, attempt_id, waiting_for)
VALUES (%(task)s, %(name)s, %(result)s, %(attempt)s, %(waiting_for)s)
ON DUPLICATE KEY UPDATE
    result = %(result)s, attempt_id = %(attempt)s, waiting_for = %(waiting_for)s

-- name: now_epoch
SELECT UNIX_TIMESTAMP(NOW(6))

-- name: suspend
UPDATE {queue_table}
SET status = 'pendente', data_hora = FROM_UNIXTIME(%(until)s), mensagem = %(mensagem)s,
    started_at = NULL, worker = NULL
WHERE id = %(id)s AND status = 'processando'

-- name: latest_attempt
-- Two steps of subqueries as workflow.sql's parent_state (MySQL reads a table an
-- UPDATE's own subquery names only without a lock); locked for the caller.
SELECT t.id, COALESCE(t.id_inicial, t.id), t.status
FROM {queue_table} AS t
WHERE t.id = COALESCE(
    (SELECT MAX(a.id) FROM {queue_table} AS a
     WHERE a.id_inicial = (SELECT COALESCE(f.id_inicial, f.id) FROM {queue_table} AS f WHERE f.id = %(id)s)),
    (SELECT COALESCE(f.id_inicial, f.id) FROM {queue_table} AS f WHERE f.id = %(id)s)
)
FOR UPDATE

-- name: nth_event
SELECT payload FROM {events_table}
WHERE task_id = %(task)s AND name = %(name)s
ORDER BY id
LIMIT 1 OFFSET %(n)s
LOCK IN SHARE MODE

-- name: wake_waiting
UPDATE {queue_table}
SET data_hora = NOW(6)
WHERE id = %(id)s AND status = 'pendente'
  AND EXISTS (
      SELECT 1 FROM {steps_table} AS s
      WHERE s.task_id = %(task)s AND s.waiting_for = %(name)s
  )

-- name: notify_ready
SELECT 1
