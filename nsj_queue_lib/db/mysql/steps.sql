-- Named queries of durable steps and waits: PostgreSQL's steps.sql, these
-- replacing its queries by name. Reads that decide are locking reads: they see
-- the latest committed rows whatever the caller's snapshot (REPEATABLE READ).
-- A task's latest attempt (send_event) is by_task_id.sql's, which locks no
-- gap; {hot} pins a statement of an unfinished row to the hot partition on the
-- partitioned layout (db/layout_cache.py), else it is empty.
-- base: postgres

-- name: count_prefixed
SELECT COUNT(*) FROM {steps_table}
WHERE task_id = %(task)s AND LEFT(name, CHAR_LENGTH(%(prefix)s)) = %(prefix)s

-- name: own_attempt
SELECT status FROM {queue_table} WHERE {hot}id = %(id)s FOR UPDATE

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
WHERE {hot}id = %(id)s AND status = 'processando'

-- name: nth_event
SELECT payload FROM {events_table}
WHERE task_id = %(task)s AND name = %(name)s
ORDER BY id
LIMIT 1 OFFSET %(n)s
LOCK IN SHARE MODE

-- name: wake_waiting
UPDATE {queue_table}
SET data_hora = NOW(6)
WHERE {hot}id = %(id)s AND status = 'pendente'
  AND EXISTS (
      SELECT 1 FROM {steps_table} AS s
      WHERE s.task_id = %(task)s AND s.waiting_for = %(name)s
  )

-- name: notify_ready
SELECT 1
