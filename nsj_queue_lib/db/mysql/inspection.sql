-- Named queries of the nsjq command on MySQL / MariaDB (and SingleStore),
-- db/mysql/inspection.py. {queue_table} is a validated identifier; every value
-- is a bound parameter. {attempt_columns} is an attempt's select list
-- (db/inspection.py), table alias t, times as epoch seconds (UNIX_TIMESTAMP
-- of a TIMESTAMP column is its instant, whatever the session's time zone).
-- A task's latest attempt is the one not requeued: reenfileirado marks every
-- attempt that a later one follows. An operation of several statements lists
-- them as "-- step: <name>" sections, run in order in one transaction.

-- name: summary
-- Counts per processo and status, by the database's clock. Reads the whole
-- table once: its cost grows with the table, so purge keeps it small.
SELECT t.processo,
       t.status,
       SUM(NOT COALESCE(t.reenfileirado, false)) AS tasks,
       TIMESTAMPDIFF(MICROSECOND, MIN(CASE
           WHEN t.status = 'pendente' AND t.data_hora <= NOW(6) THEN t.data_hora
       END), NOW(6)) / 1000000 AS oldest_ready_seconds,
       SUM(t.status IN ('falha', 'falha_processando')
           AND t.data_hora >= NOW(6) - INTERVAL %(recent_seconds)s SECOND) AS failed_24h,
       SUM(t.dead AND t.id_inicial IS NULL
           AND t.data_hora_inicial >= NOW(6) - INTERVAL %(recent_seconds)s SECOND) AS dead_24h
FROM {queue_table} AS t
GROUP BY t.processo, t.status
ORDER BY t.processo, t.status

-- name: summary_tallied
-- summary's rows from four parts, each bounded (db/tally.py): the unfinished
-- attempts (status leads the indexes they are read from), the tally of the
-- finished ones, and, read from the table, the finished attempts past the last
-- fold (an interval's worth) and the open attempts that ended since it (their
-- ids are at most folded_to). An attempt is in exactly one part.
-- On the partitioned layout {hot_t} pins the unfinished attempts' branch to the
-- hot partition and {recent_t} the finished ones' to the days since the last
-- fold (a literal, so that the other partitions are pruned: each branch read
-- every day partition's index, 15 ms of the query at 77 partitions;
-- db/mysql/inspection.py).
SELECT p.processo, p.status, SUM(p.tasks) AS tasks,
       TIMESTAMPDIFF(MICROSECOND, MIN(p.oldest_ready), NOW(6)) / 1000000 AS oldest_ready_seconds,
       COALESCE(SUM(p.failed_24h), 0) AS failed_24h,
       COALESCE(SUM(p.dead_24h), 0) AS dead_24h
FROM (
    SELECT t.processo, t.status,
           SUM(NOT COALESCE(t.reenfileirado, false)) AS tasks,
           MIN(CASE WHEN t.status = 'pendente' AND t.data_hora <= NOW(6) THEN t.data_hora END)
               AS oldest_ready,
           SUM(t.status IN ('falha', 'falha_processando')
               AND t.data_hora >= NOW(6) - INTERVAL %(recent_seconds)s SECOND) AS failed_24h,
           SUM(t.dead AND t.id_inicial IS NULL
               AND t.data_hora_inicial >= NOW(6) - INTERVAL %(recent_seconds)s SECOND) AS dead_24h
    FROM (
        SELECT {tally_columns} FROM {queue_table} AS t
        WHERE {hot_t}t.status IN ('pendente', 'agendada', 'processando', 'aguardando')
        UNION ALL
        SELECT {tally_columns} FROM {queue_table} AS t
        WHERE {recent_t}t.status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')
          AND t.id > COALESCE((SELECT s.folded_to FROM {tally_state_table} AS s WHERE s.id = 1), 0)
        UNION ALL
        SELECT {tally_columns} FROM {queue_table} AS t
        JOIN {tally_open_table} AS o ON o.id = t.id
        WHERE {recent_t}t.status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')
    ) AS t
    GROUP BY t.processo, t.status
    UNION ALL
    -- Failures and dead letters of the last day, to the hour.
    SELECT NULLIF(c.processo, ''), c.status, SUM(c.tasks), NULL,
           SUM(CASE WHEN c.hour >= FLOOR(UNIX_TIMESTAMP(NOW(6)) / 3600) - %(recent_seconds)s DIV 3600
               THEN c.failed ELSE 0 END),
           SUM(CASE WHEN c.hour >= FLOOR(UNIX_TIMESTAMP(NOW(6)) / 3600) - %(recent_seconds)s DIV 3600
               THEN c.dead ELSE 0 END)
    FROM {tally_table} AS c
    GROUP BY c.processo, c.status
) AS p
GROUP BY p.processo, p.status
ORDER BY p.processo, p.status

-- name: depth
-- Tasks with work ahead, per processo and status (the workers' queue-depth
-- metric): status leads the index it reads (indexes.sql), so the cost follows
-- the backlog, not the table's history.
SELECT t.processo,
       t.status,
       COUNT(*) AS tasks,
       TIMESTAMPDIFF(MICROSECOND, MIN(CASE
           WHEN t.status = 'pendente' AND t.data_hora <= NOW(6) THEN t.data_hora
       END), NOW(6)) / 1000000 AS oldest_ready_seconds
FROM {queue_table} AS t
WHERE {hot_t}t.status IN ('pendente', 'agendada', 'processando')
GROUP BY t.processo, t.status

-- name: recent
-- Settled attempts due in the last window (an hour), per bucket of bucket
-- seconds (0: the newest), processo, status and whether they are dead letters;
-- finished_recently counts those that ended within the last rate_window seconds
-- (attempts due over an hour ago that end now are not read). The range on
-- data_hora reads idx_data_hora.
SELECT FLOOR(TIMESTAMPDIFF(MICROSECOND, t.data_hora, NOW(6)) / 1000000 / %(bucket)s) AS bucket,
       t.processo,
       t.status,
       t.dead AS is_dead,
       COUNT(*) AS tasks,
       COUNT(CASE WHEN t.finished_at >= NOW(6) - INTERVAL %(rate_window)s SECOND THEN 1 END)
           AS finished_recently
FROM {queue_table} AS t
WHERE t.data_hora >= NOW(6) - INTERVAL %(window)s SECOND
  AND t.status NOT IN ('pendente', 'agendada', 'processando')
GROUP BY bucket, t.processo, t.status, is_dead

-- name: list_tasks
-- Each attempt's age: since its data_hora, by the database's clock.
SELECT {attempt_columns},
       TIMESTAMPDIFF(MICROSECOND, t.data_hora, NOW(6)) / 1000000 AS age_seconds
FROM {queue_table} AS t
WHERE {task_filter}
ORDER BY t.id DESC
LIMIT %(limit)s OFFSET %(offset)s

-- name: list_running
-- list_tasks of the running attempts (nsjq status's list), pinned by {hot_t} on the
-- partitioned layout.
SELECT {attempt_columns},
       TIMESTAMPDIFF(MICROSECOND, t.data_hora, NOW(6)) / 1000000 AS age_seconds
FROM {queue_table} AS t
WHERE {hot_t}t.status = 'processando' AND NOT COALESCE(t.reenfileirado, false)
ORDER BY t.id DESC
LIMIT %(limit)s

-- name: task_chain
-- A task's attempts all carry its first attempt's id (id_inicial), its dead
-- letter's attempts that id as live_id; all of them come after the first.
SELECT {attempt_columns_with_payload}
FROM {queue_table} AS t
JOIN (SELECT COALESCE(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s) AS task
  ON t.id >= task.first_id
 AND (t.id = task.first_id OR t.id_inicial = task.first_id
      OR (t.dead AND t.live_id = task.first_id))
ORDER BY t.id

-- name: task_attempts
-- task_chain without the dead letter (which only a scan finds, live_id having no
-- index): the first attempt by primary key, the others by idx_chain (id_inicial first).
SELECT {attempt_columns_with_payload} FROM {queue_table} AS t
WHERE t.id = (SELECT COALESCE(id_inicial, id) FROM {queue_table} WHERE id = %(id)s)
UNION ALL
SELECT {attempt_columns_with_payload} FROM {queue_table} AS t
WHERE t.id_inicial = (SELECT COALESCE(id_inicial, id) FROM {queue_table} WHERE id = %(id)s)
ORDER BY id

-- name: retry_task
-- The latest attempt of the task, when it ran out of attempts, is marked as
-- requeued (proxima_tentativa: now) and followed by a new 'pendente' attempt
-- due at that instant, built like fail_and_retry's next attempt (queries.sql).
-- Conditional on the latest attempt still being exhausted and not requeued, so
-- two concurrent retries add one attempt: the store skips the insert when mark
-- changed no row.
-- step: latest
SELECT t.id
FROM {queue_table} AS t
JOIN (SELECT COALESCE(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s) AS task
  ON t.id >= task.first_id AND (t.id = task.first_id OR t.id_inicial = task.first_id)
ORDER BY t.id DESC
LIMIT 1;
-- step: mark
UPDATE {queue_table}
SET reenfileirado = true, proxima_tentativa = NOW(6)
WHERE id = %(id)s
  AND estouro_tentativas
  AND NOT COALESCE(reenfileirado, false)
  AND status IN ('falha', 'falha_processando');
-- step: insert
INSERT INTO {queue_table} ({next_attempt_columns})
SELECT {next_attempt_values}
FROM {queue_table} AS f
WHERE f.id = %(id)s

-- name: live_workers
-- The workers whose heartbeat is recent (runtime/registry.py).
SELECT w.worker, w.processos,
       UNIX_TIMESTAMP(w.started_at) AS started_at,
       UNIX_TIMESTAMP(w.seen_at) AS seen_at
FROM {workers_table} AS w
WHERE w.seen_at >= NOW(6) - INTERVAL %(seen_within)s SECOND
ORDER BY w.worker

-- name: running_by_worker
-- The attempts each worker runs now; status leads idx_due (indexes.sql), so the
-- cost follows the running attempts.
SELECT t.worker, COUNT(*) AS tasks
FROM {queue_table} AS t
WHERE t.status = 'processando'
GROUP BY t.worker
