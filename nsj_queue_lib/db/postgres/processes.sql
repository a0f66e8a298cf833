-- Named queries of process instances (nsj_queue_lib/process/).
-- {queue_table}, {processes_table}, {process_tasks_table} and {process_events_table}
-- are validated identifiers; every value is a bound parameter.

-- name: create_process
-- The process's row; nothing when the id exists (start_process then refuses it).
INSERT INTO {processes_table} (process_id, processo, status, state)
VALUES (%(process_id)s, %(processo)s, 'running', '{}')
ON CONFLICT (process_id) DO NOTHING
RETURNING process_id

-- name: read_process
-- A client's look before enqueuing a call, key-share-locked until its commit: a removal
-- (a DELETE) waits for the call and then removes it with the process, or comes first;
-- a running task's lock (FOR NO KEY UPDATE: it changes no key) does not hold it up.
SELECT corrupted_by FROM {processes_table} WHERE process_id = %(process_id)s FOR KEY SHARE

-- name: add_task
INSERT INTO {process_tasks_table} (task_id, process_id, kind)
VALUES (%(task_id)s, %(process_id)s, %(kind)s)

-- name: load_for_task
-- What a task of a process starts with: the process, locked until the task's commit
-- (FOR NO KEY UPDATE: a removal waits for it, a client enqueuing a call does not), and
-- what the task is. No row: the process was removed.
SELECT p.processo, p.status, p.detail, p.state, p.corrupted_by, p.timer_task_id, p.remove_at,
       pt.kind
FROM {processes_table} AS p
LEFT JOIN {process_tasks_table} AS pt ON pt.task_id = %(task_id)s
WHERE p.process_id = %(process_id)s
FOR NO KEY UPDATE OF p

-- name: load_for_tasks
-- load_for_task for the process tasks of a commit group at once (process/batch.py),
-- by each table's primary key: one row per task whose process exists. One look-up
-- per task, LIMIT 1 each: a group's 20 tasks were joined by hashing both tables, read
-- whole at every group (bench_processes.py's 3,000 calls read 1.35 million rows): the
-- planner costs a random page at 4 sequential ones, so for tables of a few thousand
-- rows it prefers reading them whole; a look-up that stops at its one row costs less.
SELECT wanted.task_id, p.processo, p.status, p.detail, p.state, p.corrupted_by,
       p.timer_task_id, p.remove_at, pt.kind
FROM unnest(%(task_ids)s::bigint[]) AS wanted(task_id)
CROSS JOIN LATERAL (
    SELECT t.process_id, t.kind FROM {process_tasks_table} AS t
    WHERE t.task_id = wanted.task_id
    LIMIT 1
) AS pt
CROSS JOIN LATERAL (
    SELECT l.processo, l.status, l.detail, l.state, l.corrupted_by, l.timer_task_id,
           l.remove_at
    FROM {processes_table} AS l
    WHERE l.process_id = pt.process_id
    LIMIT 1
    FOR NO KEY UPDATE
) AS p

-- name: save_process
-- A task's success: the state, status and detail it left, the process repaired when
-- the task was a repair, its timer consumed when it was the pending timer, and the
-- task's response; one statement (a round trip per task counts: bench_processes.py).
WITH answered AS (
    UPDATE {process_tasks_table} SET response = %(response)s
    WHERE task_id = %(task_id)s AND %(response)s::text IS NOT NULL
)
UPDATE {processes_table}
SET state = %(state)s, status = %(status)s, detail = %(detail)s,
    corrupted_by = CASE WHEN %(repair)s THEN NULL ELSE corrupted_by END,
    timer_task_id = CASE WHEN timer_task_id = %(task_id)s THEN NULL ELSE timer_task_id END,
    updated_at = clock_timestamp()
WHERE process_id = %(process_id)s

-- name: save_processes
-- save_process for a commit group's successes, sent with the group's settle in one round
-- trip (process/batch.py): $1..$7 text arrays of process ids, task ids, states, statuses,
-- details, repairs and responses, in step. One row: how many processes were written.
-- Each table by its primary key (the = ANY conditions name the keys): prepared, the
-- statement's generic plan joined the arrays to both tables by hash joins over
-- sequential scans, every row of both read at every group's settle (bench_processes.py's
-- 3,000 calls read 1.35 million); the settle's round trip now turns sequential scans off
-- for its transaction before this statement (db/postgres/session.py).
WITH v AS (
    SELECT *
    FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::boolean[],
                $7::text[])
         AS v(process_id, task_id, state, status, detail, repair, response)
), answered AS (
    UPDATE {process_tasks_table} AS pt SET response = v.response
    FROM v WHERE pt.task_id = v.task_id AND v.response IS NOT NULL
      AND pt.task_id = ANY($2::bigint[])
), saved AS (
    UPDATE {processes_table} AS p
    SET state = v.state, status = v.status, detail = v.detail,
        corrupted_by = CASE WHEN v.repair THEN NULL ELSE p.corrupted_by END,
        timer_task_id = CASE WHEN p.timer_task_id = v.task_id THEN NULL ELSE p.timer_task_id END,
        updated_at = clock_timestamp()
    FROM v WHERE p.process_id = v.process_id AND p.process_id = ANY($1::text[])
    RETURNING 1
)
SELECT count(*) AS saved FROM saved

-- name: emit
INSERT INTO {process_events_table} (process_id, task_id, event_type, payload)
VALUES (%(process_id)s, %(task_id)s, %(event_type)s, %(payload)s)

-- name: set_timer
UPDATE {processes_table} SET timer_task_id = %(task_id)s WHERE process_id = %(process_id)s

-- name: remove_after
UPDATE {processes_table}
SET remove_at = clock_timestamp() + %(microseconds)s * interval '1 microsecond'
WHERE process_id = %(process_id)s

-- name: corrupt
-- A task of a process failed for good (dead-lettered, or failed with nothing after):
-- the process is corrupted by it, in the transaction that writes the failure.
UPDATE {processes_table} AS p
SET corrupted_by = pt.task_id, status = 'corrupted', detail = %(detail)s,
    updated_at = clock_timestamp()
FROM {process_tasks_table} AS pt
WHERE pt.task_id = (SELECT coalesce(a.id_inicial, a.id) FROM {queue_table} AS a WHERE a.id = %(id)s)
  AND p.process_id = pt.process_id

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
-- The process's latest tasks, each with its latest attempt's status.
SELECT pt.task_id, pt.kind, pt.response, pt.created_at, t.processo, t.status, t.mensagem,
       t.data_hora, t.started_at, t.finished_at
FROM (SELECT * FROM {process_tasks_table} WHERE process_id = %(process_id)s
      ORDER BY task_id DESC LIMIT %(limit)s) AS pt
JOIN {queue_table} AS t
  ON t.id = coalesce((SELECT max(a.id) FROM {queue_table} AS a WHERE a.id_inicial = pt.task_id),
                     pt.task_id)
ORDER BY pt.task_id DESC

-- name: task_state
-- One task of the process (its latest attempt), as recent_tasks gives each.
SELECT pt.task_id, pt.kind, pt.response, pt.created_at, t.processo, t.status, t.mensagem,
       t.data_hora, t.started_at, t.finished_at
FROM {process_tasks_table} AS pt
JOIN {queue_table} AS t
  ON t.id = coalesce((SELECT max(a.id) FROM {queue_table} AS a WHERE a.id_inicial = pt.task_id),
                     pt.task_id)
WHERE pt.task_id = %(task_id)s

-- name: task_process
-- The process a task (any attempt's id) belongs to, and its kind and response.
SELECT pt.process_id, pt.kind, pt.response FROM {process_tasks_table} AS pt
WHERE pt.task_id = (SELECT coalesce(a.id_inicial, a.id) FROM {queue_table} AS a WHERE a.id = %(id)s)

-- name: due_removals
SELECT process_id FROM {processes_table}
WHERE remove_at IS NOT NULL AND remove_at <= clock_timestamp()
ORDER BY remove_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: unfinished_tasks
-- A removed process's tasks that have not finished: their latest attempts' ids.
SELECT t.id
FROM {process_tasks_table} AS pt
JOIN {queue_table} AS t
  ON t.id = coalesce((SELECT max(a.id) FROM {queue_table} AS a WHERE a.id_inicial = pt.task_id),
                     pt.task_id)
WHERE pt.process_id = %(process_id)s AND t.status IN ('pendente', 'agendada', 'aguardando')

-- name: cancel_unfinished
-- Those attempts 'cancelada' (mensagem and finished_at before status: MySQL assigns left
-- to right, and the dialects keep one shape).
UPDATE {queue_table}
SET mensagem = %(mensagem)s, finished_at = clock_timestamp(), status = 'cancelada'
WHERE id = ANY(%(ids)s) AND status IN ('pendente', 'agendada', 'aguardando')

-- name: delete_events
DELETE FROM {process_events_table} WHERE process_id = %(process_id)s

-- name: delete_tasks
DELETE FROM {process_tasks_table} WHERE process_id = %(process_id)s

-- name: delete_process
DELETE FROM {processes_table} WHERE process_id = %(process_id)s
