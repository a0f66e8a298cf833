-- Pause and resume on MySQL/MariaDB: PostgreSQL's pause.sql, which says what
-- each statement is for, with these statements instead.
-- base: postgres

-- name: pause
-- paused_until is a UTC DATETIME (limits_table.sql): the UTC value itself is
-- written, so neither the caller's session time zone (FROM_UNIXTIME's, with
-- its daylight-saving folds) nor 2038 (FROM_UNIXTIME's NULL) changes it.
INSERT INTO {limits_table} (processo, paused, paused_until, declared_by)
VALUES (%(processo)s, 1, %(until_utc)s, %(by)s)
ON DUPLICATE KEY UPDATE paused = 1, paused_until = %(until_utc)s

-- name: paused
-- Read and compared in UTC too: TIMESTAMPDIFF of two DATETIMEs converts nothing.
SELECT processo,
       TIMESTAMPDIFF(MICROSECOND, TIMESTAMP '1970-01-01 00:00:00', paused_until) AS until_us,
       paused_until IS NOT NULL AND paused_until <= UTC_TIMESTAMP(6) AS expired
FROM {limits_table}
WHERE paused
ORDER BY processo

-- name: wake
-- No NOTIFY: the workers poll (QUEUE_POLL_INTERVAL) or the socket server wakes them.
DO 0

-- name: breaker_fail
INSERT INTO {limits_table} (processo, breaker_failures, declared_by)
VALUES (%(processo)s, 1, %(by)s)
ON DUPLICATE KEY UPDATE breaker_failures = breaker_failures + 1

-- name: breaker_open
UPDATE {limits_table}
SET breaker_open = 1, breaker_trial = 0, breaker_failures = 0,
    breaker_trial_at = NULL, breaker_trial_task = NULL,
    breaker_until = TIMESTAMPADD(MICROSECOND, ROUND(%(cool_down_s)s * 1000000), NOW(6))
WHERE processo = %(processo)s

-- name: breakers
SELECT l.processo, l.breaker_failures, l.breaker_open, l.breaker_trial,
       CAST(UNIX_TIMESTAMP(l.breaker_until) * 1000000 AS SIGNED) AS until_us,
       l.breaker_trial_task,
       TIMESTAMPDIFF(MICROSECOND, l.breaker_trial_at, NOW(6)) / 1e6 AS trial_age_s
FROM {limits_table} AS l
WHERE l.breaker_failures > 0 OR l.breaker_open
ORDER BY l.processo

-- name: trial_timeouts
SELECT t.id, t.timeout_s
FROM {table} AS t
WHERE t.id IN %(ids)s
