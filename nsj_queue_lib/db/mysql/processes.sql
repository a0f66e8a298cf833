-- Named queries of process instances (nsj_queue_lib/process/), as PostgreSQL's
-- processes.sql. The reads that decide are locking reads: they read the latest
-- committed rows whatever the caller's snapshot (REPEATABLE READ).
-- {hot} pins a statement of unfinished rows to the hot partition on the
-- partitioned layout (db/layout_cache.py), else it is empty.

-- name: create_process
-- The process's row; nothing when the id exists (rowcount 0: start_process then refuses
-- it). IGNORE, not ON DUPLICATE KEY UPDATE: under CLIENT_FOUND_ROWS (Django's MySQL
-- connections set it) an unchanged duplicate counts 1 there. What IGNORE would also
-- turn into warnings cannot happen: both values were checked against the columns' sizes.
INSERT IGNORE INTO {processes_table} (process_id, processo, status, state)
VALUES (%(process_id)s, %(processo)s, 'running', '{}')

-- name: read_process
-- Unlocked: a running task holds its process's row (FOR UPDATE) until its commit, and a
-- call must not wait for it. A call that races a removal finds its process gone when it
-- runs, and ends 'cancelada'.
SELECT corrupted_by FROM {processes_table} WHERE process_id = %(process_id)s

-- name: add_task
INSERT INTO {process_tasks_table} (task_id, process_id, kind)
VALUES (%(task_id)s, %(process_id)s, %(kind)s)

-- name: load_for_task
SELECT p.processo, p.status, p.detail, p.state, p.corrupted_by, p.timer_task_id, p.remove_at,
       pt.kind
FROM {processes_table} AS p
LEFT JOIN {process_tasks_table} AS pt ON pt.task_id = %(task_id)s
WHERE p.process_id = %(process_id)s
FOR UPDATE

-- name: save_process
-- As PostgreSQL's, in one multi-table UPDATE. corrupted_by and timer_task_id are
-- assigned before the columns their CASEs do not read: MySQL evaluates SET left to right.
UPDATE {processes_table} AS p
LEFT JOIN {process_tasks_table} AS pt ON pt.task_id = %(task_id)s
SET p.corrupted_by = CASE WHEN %(repair)s THEN NULL ELSE p.corrupted_by END,
    p.timer_task_id = CASE WHEN p.timer_task_id = %(task_id)s THEN NULL ELSE p.timer_task_id END,
    p.state = %(state)s, p.status = %(status)s, p.detail = %(detail)s,
    p.updated_at = CURRENT_TIMESTAMP(6),
    pt.response = COALESCE(%(response)s, pt.response)
WHERE p.process_id = %(process_id)s

-- name: emit
INSERT INTO {process_events_table} (process_id, task_id, event_type, payload)
VALUES (%(process_id)s, %(task_id)s, %(event_type)s, %(payload)s)

-- name: set_timer
UPDATE {processes_table} SET timer_task_id = %(task_id)s WHERE process_id = %(process_id)s

-- name: remove_after
UPDATE {processes_table}
SET remove_at = CURRENT_TIMESTAMP(6) + INTERVAL %(microseconds)s MICROSECOND
WHERE process_id = %(process_id)s

-- name: corrupt
UPDATE {processes_table} AS p
JOIN {process_tasks_table} AS pt ON pt.process_id = p.process_id
SET p.corrupted_by = pt.task_id, p.status = 'corrupted', p.detail = %(detail)s,
    p.updated_at = CURRENT_TIMESTAMP(6)
WHERE pt.task_id = (SELECT COALESCE(a.id_inicial, a.id) FROM {queue_table} AS a WHERE a.id = %(id)s)

-- name: get_process
SELECT process_id, processo, status, detail, state, corrupted_by, timer_task_id, remove_at,
       created_at, updated_at
FROM {processes_table} WHERE process_id = %(process_id)s

-- name: recent_events
SELECT id, task_id, event_type, payload, created_at FROM {process_events_table}
WHERE process_id = %(process_id)s
ORDER BY id DESC
LIMIT %(limit)s

-- name: recent_tasks
SELECT pt.task_id, pt.kind, pt.response, pt.created_at, t.processo, t.status, t.mensagem,
       t.data_hora, t.started_at, t.finished_at
FROM (SELECT * FROM {process_tasks_table} WHERE process_id = %(process_id)s
      ORDER BY task_id DESC LIMIT %(limit)s) AS pt
JOIN {queue_table} AS t
  ON t.id = COALESCE((SELECT MAX(a.id) FROM {queue_table} AS a WHERE a.id_inicial = pt.task_id),
                     pt.task_id)
ORDER BY pt.task_id DESC

-- name: task_state
-- One task of the process (its latest attempt), as recent_tasks gives each.
SELECT pt.task_id, pt.kind, pt.response, pt.created_at, t.processo, t.status, t.mensagem,
       t.data_hora, t.started_at, t.finished_at
FROM {process_tasks_table} AS pt
JOIN {queue_table} AS t
  ON t.id = COALESCE((SELECT MAX(a.id) FROM {queue_table} AS a WHERE a.id_inicial = pt.task_id),
                     pt.task_id)
WHERE pt.task_id = %(task_id)s

-- name: task_process
SELECT pt.process_id, pt.kind, pt.response FROM {process_tasks_table} AS pt
WHERE pt.task_id = (SELECT COALESCE(a.id_inicial, a.id) FROM {queue_table} AS a WHERE a.id = %(id)s)

-- name: due_removals
SELECT process_id FROM {processes_table}
WHERE remove_at IS NOT NULL AND remove_at <= CURRENT_TIMESTAMP(6)
ORDER BY remove_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: unfinished_tasks
SELECT t.id
FROM {process_tasks_table} AS pt
JOIN {queue_table} AS t
  ON t.id = COALESCE((SELECT MAX(a.id) FROM {queue_table} AS a WHERE a.id_inicial = pt.task_id),
                     pt.task_id)
WHERE pt.process_id = %(process_id)s AND t.status IN ('pendente', 'agendada', 'aguardando')

-- name: cancel_unfinished
-- Those attempts 'cancelada' (mensagem and finished_at before status: MySQL assigns left
-- to right, and the dialects keep one shape).
UPDATE {queue_table}
SET mensagem = %(mensagem)s, finished_at = NOW(6), status = 'cancelada'
WHERE {hot}id IN %(ids)s AND status IN ('pendente', 'agendada', 'aguardando')

-- name: delete_events
DELETE FROM {process_events_table} WHERE process_id = %(process_id)s

-- name: delete_tasks
DELETE FROM {process_tasks_table} WHERE process_id = %(process_id)s

-- name: delete_process
DELETE FROM {processes_table} WHERE process_id = %(process_id)s
