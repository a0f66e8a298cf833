-- Per-processo limits on MySQL/MariaDB: PostgreSQL's limits.sql, which says
-- why each statement is there, with these statements instead.
-- base: postgres

-- name: claim
CALL {limited_claim}(%(open)s, %(known)s, %(early)s, %(take_lock)s, %(prefix)s,
                     %(handled_processos)s, %(worker)s)

-- name: routine_version
SELECT routine_comment
FROM information_schema.routines
WHERE routine_schema = COALESCE(%(schema)s, DATABASE())
  AND routine_name = %(name)s
  AND routine_type = 'PROCEDURE'

-- name: declare
-- The new values are the parameters again, not VALUES(column): MySQL 8.0.20
-- deprecates VALUES() here, and MariaDB lacks MySQL's row alias.
INSERT INTO {limits_table} (processo, max_concurrent, rate_count, rate_period_s,
                            interval_min_s, interval_max_s, time_windows,
                            max_concurrent_per_key, declared_by)
VALUES (%(processo)s, %(max_concurrent)s, %(rate_count)s, %(rate_period_s)s,
        %(interval_min_s)s, %(interval_max_s)s, %(time_windows)s,
        %(max_concurrent_per_key)s, %(declared_by)s)
ON DUPLICATE KEY UPDATE
    max_concurrent = %(max_concurrent)s, rate_count = %(rate_count)s,
    rate_period_s = %(rate_period_s)s, interval_min_s = %(interval_min_s)s,
    interval_max_s = %(interval_max_s)s, time_windows = %(time_windows)s,
    max_concurrent_per_key = %(max_concurrent_per_key)s,
    declared_by = %(declared_by)s, declared_at = NOW(6)
