-- Named queries of the nsjq command on PostgreSQL (db/postgres/inspection.py).
-- {queue_table} is a validated identifier; every value is a bound parameter.
-- {attempt_columns} is an attempt's select list (db/inspection.py), table alias t.
-- A task's latest attempt is the one not requeued: reenfileirado marks every
-- attempt that a later one follows.

-- name: summary
-- Counts per processo and status, by the database's clock. Reads the whole
-- table once: its cost grows with the table, so purge keeps it small.
SELECT t.processo,
       t.status,
       count(*) FILTER (WHERE NOT coalesce(t.reenfileirado, false)) AS tasks,
       extract(epoch FROM clock_timestamp() - min(t.data_hora) FILTER (
           WHERE t.status = 'pendente' AND t.data_hora <= clock_timestamp()
       ))::float8 AS oldest_ready_seconds,
       count(*) FILTER (
           WHERE t.status IN ('falha', 'falha_processando')
             AND t.data_hora >= clock_timestamp() - make_interval(secs => %(recent_seconds)s)
       ) AS failed_24h,
       count(*) FILTER (
           WHERE t.dead AND t.id_inicial IS NULL
             AND t.data_hora_inicial >= clock_timestamp() - make_interval(secs => %(recent_seconds)s)
       ) AS dead_24h
FROM {queue_table} AS t
GROUP BY t.processo, t.status
ORDER BY t.processo, t.status

-- name: summary_tallied
-- On the partitioned layout {hot_t} pins the unfinished attempts' branches to the hot
-- partition and {recent_t} the finished ones' to the days since the last fold (a
-- literal: the planner then leaves the other partitions out, where planning a branch
-- on every day partition took more than the query; db/postgres/inspection.py).
-- summary's rows from four parts, each bounded (db/tally.py): the unfinished
-- attempts (each branch on a partial index's own condition), the tally of the
-- finished ones, and, read from the table, the finished attempts past the last
-- fold (an interval's worth) and the open attempts that ended since it (their
-- ids are at most folded_to; one look-up by id each). An attempt is in exactly
-- one part.
WITH clock AS (
    SELECT floor(extract(epoch FROM clock_timestamp()) / 3600) - %(recent_seconds)s / 3600 AS recent_hour,
           coalesce((SELECT folded_to FROM {tally_state_table} WHERE id = 1), 0) AS folded_to
),
gone AS (
    SELECT o.id FROM {tally_open_table} AS o
    WHERE coalesce((SELECT h.status FROM {queue_table} AS h WHERE {hot_h}h.id = o.id), '')
          NOT IN ('pendente', 'agendada', 'processando', 'aguardando')
),
attempts AS (
    SELECT {tally_columns} FROM {queue_table} AS t WHERE {hot_t}t.status IN ('pendente', 'agendada')
    UNION ALL
    SELECT {tally_columns} FROM {queue_table} AS t WHERE {hot_t}t.status = 'processando'
    UNION ALL
    SELECT {tally_columns} FROM {queue_table} AS t WHERE {hot_t}t.status = 'aguardando'
    UNION ALL
    SELECT {tally_columns} FROM {queue_table} AS t
    WHERE {recent_t}t.status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')
      AND t.id > (SELECT folded_to FROM clock)
    UNION ALL
    SELECT t.* FROM gone AS g CROSS JOIN LATERAL (
        -- LIMIT: one look-up by id per attempt (a join could read the whole table)
        SELECT {tally_columns} FROM {queue_table} AS t
        WHERE {recent_t}t.id = g.id AND t.status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')
        LIMIT 1
    ) AS t
),
parts AS (
    SELECT t.processo, t.status,
           count(*) FILTER (WHERE NOT coalesce(t.reenfileirado, false)) AS tasks,
           min(t.data_hora) FILTER (
               WHERE t.status = 'pendente' AND t.data_hora <= clock_timestamp()
           ) AS oldest_ready,
           count(*) FILTER (
               WHERE t.status IN ('falha', 'falha_processando')
                 AND t.data_hora >= clock_timestamp() - make_interval(secs => %(recent_seconds)s)
           ) AS failed_24h,
           count(*) FILTER (
               WHERE t.dead AND t.id_inicial IS NULL
                 AND t.data_hora_inicial >= clock_timestamp() - make_interval(secs => %(recent_seconds)s)
           ) AS dead_24h
    FROM attempts AS t
    GROUP BY t.processo, t.status
    UNION ALL
    -- Failures and dead letters of the last day, to the hour.
    SELECT nullif(c.processo, ''), c.status, sum(c.tasks), NULL,
           sum(c.failed) FILTER (WHERE c.hour >= k.recent_hour),
           sum(c.dead) FILTER (WHERE c.hour >= k.recent_hour)
    FROM {tally_table} AS c CROSS JOIN clock AS k
    GROUP BY c.processo, c.status
)
SELECT p.processo, p.status, sum(p.tasks)::bigint AS tasks,
       extract(epoch FROM clock_timestamp() - min(p.oldest_ready))::float8 AS oldest_ready_seconds,
       coalesce(sum(p.failed_24h), 0)::bigint AS failed_24h,
       coalesce(sum(p.dead_24h), 0)::bigint AS dead_24h
FROM parts AS p
GROUP BY p.processo, p.status
ORDER BY p.processo, p.status

-- name: depth
-- Tasks with work ahead, per processo and status (the workers' queue-depth
-- metric). Each branch has a partial index's own condition (indexes.sql), so
-- the cost follows the backlog, not the table's history.
SELECT t.processo,
       t.status,
       count(*) AS tasks,
       extract(epoch FROM clock_timestamp() - min(t.data_hora) FILTER (
           WHERE t.status = 'pendente' AND t.data_hora <= clock_timestamp()
       ))::float8 AS oldest_ready_seconds
FROM {queue_table} AS t
WHERE t.status IN ('pendente', 'agendada')
GROUP BY t.processo, t.status
UNION ALL
SELECT t.processo, t.status, count(*) AS tasks, NULL::float8 AS oldest_ready_seconds
FROM {queue_table} AS t
WHERE t.status = 'processando'
GROUP BY t.processo, t.status

-- name: recent
-- Settled attempts due in the last window (an hour), per bucket of bucket
-- seconds (0: the newest), processo, status and whether they are dead letters;
-- finished_recently counts those that ended within the last rate_window seconds
-- (the console's rate: attempts due over an hour ago that end now are not read).
-- The condition on status is the partial index idx_data_hora's own
-- (indexes.sql), and statement_timestamp() (stable, unlike clock_timestamp())
-- lets the planner bound that index's range, so only the last hour's rows are read.
SELECT floor(extract(epoch FROM statement_timestamp() - t.data_hora) / %(bucket)s)::int AS bucket,
       t.processo,
       t.status,
       t.dead AS is_dead,
       count(*) AS tasks,
       count(*) FILTER (
           WHERE t.finished_at >= statement_timestamp() - make_interval(secs => %(rate_window)s)
       ) AS finished_recently
FROM {queue_table} AS t
WHERE t.status NOT IN ('pendente', 'agendada', 'processando')
  AND t.data_hora >= statement_timestamp() - make_interval(secs => %(window)s)
GROUP BY 1, 2, 3, 4

-- name: list_tasks
-- Each attempt's age: since its data_hora, by the database's clock.
SELECT {attempt_columns},
       extract(epoch FROM clock_timestamp() - t.data_hora)::float8 AS age_seconds
FROM {queue_table} AS t
WHERE {task_filter}
ORDER BY t.id DESC
LIMIT %(limit)s OFFSET %(offset)s

-- name: list_running
-- list_tasks of the running attempts (nsjq status's list), with {hot_t}: on the
-- partitioned layout the hot partition alone is planned and read.
SELECT {attempt_columns},
       extract(epoch FROM clock_timestamp() - t.data_hora)::float8 AS age_seconds
FROM {queue_table} AS t
WHERE {hot_t}t.status = 'processando' AND NOT COALESCE(t.reenfileirado, false)
ORDER BY t.id DESC
LIMIT %(limit)s

-- name: task_chain
-- A task's attempts all carry its first attempt's id (id_inicial), its dead
-- letter's attempts that id as live_id; all of them come after the first.
WITH task AS (
    SELECT coalesce(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s
)
SELECT {attempt_columns_with_payload}
FROM {queue_table} AS t, task
WHERE t.id >= task.first_id
  AND (t.id = task.first_id OR t.id_inicial = task.first_id
       OR (t.dead AND t.live_id = task.first_id))
ORDER BY t.id

-- name: task_attempts
-- task_chain without the dead letter (which only a scan finds, live_id having no
-- index): the first attempt by primary key, the others by idx_attempts.
WITH task AS (
    SELECT coalesce(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s
)
SELECT {attempt_columns_with_payload} FROM {queue_table} AS t, task WHERE t.id = task.first_id
UNION ALL
SELECT {attempt_columns_with_payload} FROM {queue_table} AS t, task WHERE t.id_inicial = task.first_id
ORDER BY id

-- name: retry_task
-- The latest attempt of the task, when it ran out of attempts, is marked as
-- requeued (proxima_tentativa: now) and followed by a new 'pendente' attempt
-- due at that instant, built like fail_and_retry's next attempt (queries.sql).
-- Conditional on the latest attempt still being exhausted and not requeued, so
-- two concurrent retries add one attempt.
WITH task AS (
    SELECT coalesce(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s
), latest AS (
    SELECT t.id
    FROM {queue_table} AS t, task
    WHERE t.id >= task.first_id AND (t.id = task.first_id OR t.id_inicial = task.first_id)
    ORDER BY t.id DESC
    LIMIT 1
), failed AS (
    UPDATE {queue_table} AS f
    SET reenfileirado = true, proxima_tentativa = clock_timestamp()
    FROM latest
    WHERE f.id = latest.id
      AND f.estouro_tentativas
      AND NOT coalesce(f.reenfileirado, false)
      AND f.status IN ('falha', 'falha_processando')
    RETURNING f.*
)
INSERT INTO {queue_table} ({next_attempt_columns})
SELECT {next_attempt_values}
FROM failed AS f
RETURNING id

-- name: live_workers
-- The workers whose heartbeat is recent (runtime/registry.py).
SELECT w.worker, w.processos,
       extract(epoch FROM w.started_at)::float8 AS started_at,
       extract(epoch FROM w.seen_at)::float8 AS seen_at
FROM {workers_table} AS w
WHERE w.seen_at >= clock_timestamp() - %(seen_within)s * interval '1 second'
ORDER BY w.worker

-- name: running_by_worker
-- The attempts each worker runs now; reads the partial index idx_running, so
-- the cost follows the running attempts.
SELECT t.worker, count(*) AS tasks
FROM {queue_table} AS t
WHERE t.status = 'processando'
GROUP BY t.worker
