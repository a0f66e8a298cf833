-- Named queries of durable steps and waits (nsj_queue_lib/workflow/steps.py, waits.py).
-- {queue_table}, {steps_table} and {events_table} are validated identifiers;
-- every value is a bound parameter.

-- name: step_result
SELECT result FROM {steps_table} WHERE task_id = %(task)s AND name = %(name)s

-- name: count_prefixed
-- How many checkpoints of the task have names starting with the prefix (a durable
-- pipeline's yields so far).
SELECT count(*) FROM {steps_table}
WHERE task_id = %(task)s AND left(name, length(%(prefix)s::text)) = %(prefix)s::text

-- name: own_attempt
-- The fence of a step's commit: the attempt's row, locked until that commit, so
-- that nobody rescues the task between this read and the commit.
SELECT status FROM {queue_table} WHERE id = %(id)s FOR UPDATE

-- name: save_step
INSERT INTO {steps_table} (task_id, name, result, attempt_id, waiting_for)
VALUES (%(task)s, %(name)s, %(result)s, %(attempt)s, %(waiting_for)s)
ON CONFLICT (task_id, name) DO UPDATE
SET result = EXCLUDED.result, attempt_id = EXCLUDED.attempt_id,
    waiting_for = EXCLUDED.waiting_for

-- name: now_epoch
SELECT extract(epoch FROM clock_timestamp())::float8

-- name: suspend
-- A durable wait ends its attempt without failing it: the same row is 'pendente'
-- again, due when the wait ends; its tentativa is unchanged.
UPDATE {queue_table}
SET status = 'pendente', data_hora = to_timestamp(%(until)s::float8), mensagem = %(mensagem)s,
    started_at = NULL, worker = NULL
WHERE id = %(id)s AND status = 'processando'

-- name: latest_attempt
-- The latest attempt of the task the id belongs to, and its first attempt's id,
-- locked until the caller's commit: a worker suspending the task (which locks
-- that row too) and send_event take turns.
WITH task AS (
    SELECT coalesce(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s
)
SELECT t.id, task.first_id, t.status
FROM {queue_table} AS t, task
WHERE t.id = coalesce(
    (SELECT max(a.id) FROM {queue_table} AS a WHERE a.id_inicial = task.first_id),
    task.first_id
)
FOR UPDATE OF t

-- name: add_event
INSERT INTO {events_table} (task_id, name, payload) VALUES (%(task)s, %(name)s, %(payload)s)

-- name: nth_event
-- The task's n-th event of a name (0 first), as of the latest commit.
SELECT payload FROM {events_table}
WHERE task_id = %(task)s AND name = %(name)s
ORDER BY id
LIMIT 1 OFFSET %(n)s

-- name: wake_waiting
-- A task waiting for this event becomes due now.
UPDATE {queue_table}
SET data_hora = clock_timestamp()
WHERE id = %(id)s AND status = 'pendente'
  AND EXISTS (
      SELECT 1 FROM {steps_table} AS s
      WHERE s.task_id = %(task)s AND s.waiting_for = %(name)s
  )

-- name: notify_ready
SELECT pg_notify(%(channel)s, %(payload)s)
