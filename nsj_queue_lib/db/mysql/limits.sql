-- Per-processo limits on MySQL/MariaDB: PostgreSQL's limits.sql, which says
-- why each statement is there, with these statements instead.
-- base: postgres

-- name: lock_limits
SELECT processo FROM {limits_table} WHERE processo IN %(processos)s
ORDER BY processo FOR UPDATE

-- name: states
SELECT l.processo, l.max_concurrent, l.rate_count, l.rate_period_s, l.interval_min_s,
       l.interval_max_s, l.time_windows,
       TIMESTAMPDIFF(MICROSECOND, NOW(6), l.next_start_at) / 1000000.0 AS next_start_in,
       TIMESTAMPDIFF(MICROSECOND, NOW(6), l.rate_tat) / 1000000.0 AS rate_tat_in,
       (SELECT COUNT(*) FROM {queue_table} AS r
        WHERE r.processo = l.processo AND r.status = 'processando') AS running
FROM {limits_table} AS l
WHERE EXISTS (SELECT 1 FROM {queue_table} AS t
              WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= NOW(6))
ORDER BY l.processo

-- name: pick
SELECT t.id
FROM {queue_table} AS t
WHERE t.processo = %(processo)s AND t.status = 'pendente' AND t.data_hora <= NOW(6)
  AND {lock_key_free}
ORDER BY t.prioridade DESC, t.data_hora, t.id
LIMIT 1
FOR UPDATE SKIP LOCKED

-- name: advance_interval
UPDATE {limits_table}
SET next_start_at = TIMESTAMPADD(MICROSECOND, %(micros)s, NOW(6))
WHERE processo = %(processo)s

-- name: advance_rate
UPDATE {limits_table}
SET rate_tat = TIMESTAMPADD(MICROSECOND, %(micros)s, NOW(6))
WHERE processo = %(processo)s

-- name: declare
INSERT INTO {limits_table} (processo, max_concurrent, rate_count, rate_period_s,
                            interval_min_s, interval_max_s, time_windows, declared_by)
VALUES (%(processo)s, %(max_concurrent)s, %(rate_count)s, %(rate_period_s)s,
        %(interval_min_s)s, %(interval_max_s)s, %(time_windows)s, %(declared_by)s)
ON DUPLICATE KEY UPDATE
    max_concurrent = VALUES(max_concurrent), rate_count = VALUES(rate_count),
    rate_period_s = VALUES(rate_period_s), interval_min_s = VALUES(interval_min_s),
    interval_max_s = VALUES(interval_max_s), time_windows = VALUES(time_windows),
    declared_by = VALUES(declared_by), declared_at = NOW(6)

-- name: lock_task
SELECT GET_LOCK(%(name)s, 0)
