-- Per-processo limits: the workers' declarations and the limited claim
-- (nsj_queue_lib/flow/limits.py, db/limits_store.py). MySQL's limits.sql
-- starts from these and replaces the statements that differ.

-- name: claim
-- The limited claim routine (limited_claim.sql), its task in the claim's shape.
SELECT {call_columns}, f.liveness_locked, f.wait_s, f.limits_rows, f.stale_windows
FROM {limited_claim}(%(open)s::text[], %(known)s::text[], %(early)s, %(take_lock)s,
                     %(queue_key)s, %(handled_processos)s::varchar[], %(worker)s::varchar) AS f

-- name: routine_version
SELECT obj_description(to_regprocedure(%(signature)s), 'pg_proc')

-- name: declared
SELECT processo, max_concurrent, rate_count, rate_period_s, interval_min_s, interval_max_s,
       time_windows, max_concurrent_per_key
FROM {limits_table}
-- A pause-only row (db/pause_conditions.py) declares nothing.
WHERE max_concurrent IS NOT NULL OR rate_count IS NOT NULL OR interval_min_s IS NOT NULL
   OR time_windows IS NOT NULL OR max_concurrent_per_key IS NOT NULL

-- name: declare
-- The shared state is kept: a worker starting does not reset the spacing.
INSERT INTO {limits_table} (processo, max_concurrent, rate_count, rate_period_s,
                            interval_min_s, interval_max_s, time_windows,
                            max_concurrent_per_key, declared_by)
VALUES (%(processo)s, %(max_concurrent)s, %(rate_count)s, %(rate_period_s)s,
        %(interval_min_s)s, %(interval_max_s)s, %(time_windows)s,
        %(max_concurrent_per_key)s, %(declared_by)s)
ON CONFLICT (processo) DO UPDATE
SET max_concurrent = EXCLUDED.max_concurrent, rate_count = EXCLUDED.rate_count,
    rate_period_s = EXCLUDED.rate_period_s, interval_min_s = EXCLUDED.interval_min_s,
    interval_max_s = EXCLUDED.interval_max_s, time_windows = EXCLUDED.time_windows,
    max_concurrent_per_key = EXCLUDED.max_concurrent_per_key,
    declared_by = EXCLUDED.declared_by, declared_at = clock_timestamp()

-- name: undeclare
-- A paused processo's row stays, for its pause (resume removes it), and so does
-- an open circuit breaker's (its closing removes it).
DELETE FROM {limits_table} WHERE processo = %(processo)s AND NOT paused AND NOT breaker_open
