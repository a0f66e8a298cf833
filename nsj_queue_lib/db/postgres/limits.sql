-- Per-processo limits: the limited claim and the workers' declarations
-- (nsj_queue_lib/flow/limits.py, db/limits_store.py). MySQL's limits.sql
-- starts from these and replaces the statements that differ; PostgreSQL
-- claims with take, MySQL with pick, mark, advance_* and a read of the row.

-- name: lock_limits
-- The limits rows of the processos that may start a task (by a look without
-- locks), in one order: the limited claims of a processo run one at a time,
-- so a claim's count of its running tasks cannot miss another's claim. A
-- claim waits for the holder (a few milliseconds), then reads what it wrote.
SELECT processo FROM {limits_table} WHERE processo = ANY(%(processos)s)
ORDER BY processo FOR UPDATE

-- name: count_limits
SELECT count(*) AS n FROM {limits_table}

-- name: states
-- The limited processos with a ready task: first without any lock (most
-- claims stop there: nothing may start yet), then after lock_limits in a
-- statement of its own (READ COMMITTED: a snapshot taken after the lock).
SELECT l.processo, l.max_concurrent, l.rate_count, l.rate_period_s, l.interval_min_s,
       l.interval_max_s, l.time_windows,
       EXTRACT(EPOCH FROM (l.next_start_at - clock_timestamp()))::float8 AS next_start_in,
       EXTRACT(EPOCH FROM (l.rate_tat - clock_timestamp()))::float8 AS rate_tat_in,
       (SELECT count(*) FROM {queue_table} AS r
        WHERE r.processo = l.processo AND r.status = 'processando') AS running
FROM {limits_table} AS l
WHERE EXISTS (SELECT 1 FROM {queue_table} AS t
              WHERE t.processo = l.processo AND t.status = 'pendente'
                AND t.data_hora <= clock_timestamp())
ORDER BY l.processo

-- name: mark
UPDATE {queue_table} SET status = 'processando' WHERE id = %(id)s AND status = 'pendente'

-- name: declared
SELECT processo, max_concurrent, rate_count, rate_period_s, interval_min_s, interval_max_s,
       time_windows
FROM {limits_table}

-- name: declare
-- The shared state is kept: a worker starting does not reset the spacing.
INSERT INTO {limits_table} (processo, max_concurrent, rate_count, rate_period_s,
                            interval_min_s, interval_max_s, time_windows, declared_by)
VALUES (%(processo)s, %(max_concurrent)s, %(rate_count)s, %(rate_period_s)s,
        %(interval_min_s)s, %(interval_max_s)s, %(time_windows)s, %(declared_by)s)
ON CONFLICT (processo) DO UPDATE
SET max_concurrent = EXCLUDED.max_concurrent, rate_count = EXCLUDED.rate_count,
    rate_period_s = EXCLUDED.rate_period_s, interval_min_s = EXCLUDED.interval_min_s,
    interval_max_s = EXCLUDED.interval_max_s, time_windows = EXCLUDED.time_windows,
    declared_by = EXCLUDED.declared_by, declared_at = clock_timestamp()

-- name: undeclare
DELETE FROM {limits_table} WHERE processo = %(processo)s

-- name: lock_task
SELECT pg_try_advisory_lock(%(queue_key)s, %(task_key)s)

-- name: take
-- PostgreSQL does pick, mark, advance_*, the read of the row and its liveness
-- lock in one statement (one round trip instead of five): the next ready task
-- of the processo becomes 'processando' and the processo's state moves on
-- (NULL: that limit is not declared, the column is left as it is).
WITH picked AS (
    SELECT t.id
    FROM {queue_table} AS t
    WHERE t.processo = %(processo)s AND t.status = 'pendente' AND t.data_hora <= clock_timestamp()
      AND {lock_key_free}
    ORDER BY t.prioridade DESC, t.data_hora, t.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE {queue_table} AS t
    SET status = 'processando'
    FROM picked
    WHERE t.id = picked.id
    RETURNING t.*
), advanced AS (
    UPDATE {limits_table} AS l
    SET next_start_at = COALESCE(
            clock_timestamp() + %(interval_micros)s::bigint * interval '1 microsecond',
            l.next_start_at),
        rate_tat = COALESCE(
            clock_timestamp() + %(rate_micros)s::bigint * interval '1 microsecond', l.rate_tat)
    WHERE l.processo = %(processo)s AND EXISTS (SELECT 1 FROM marked)
)
SELECT {task_columns_resolved},
       -- Database liveness locks only (%(take_lock)s): the socket server holds them otherwise.
       CASE WHEN %(take_lock)s::boolean
            THEN pg_try_advisory_lock(%(queue_key)s, (t.id %% 2147483648)::int4) END
           AS liveness_locked
FROM marked AS t
LEFT JOIN {queue_table} AS first_attempt
       ON first_attempt.id = t.id_inicial AND t.payload IS NULL
