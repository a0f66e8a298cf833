-- Pause and resume on MySQL/MariaDB: PostgreSQL's pause.sql, which says what
-- each statement is for, with these statements instead.
-- base: postgres

-- name: pause
INSERT INTO {limits_table} (processo, paused, paused_until, declared_by)
VALUES (%(processo)s, 1, FROM_UNIXTIME(%(until_s)s), %(by)s)
ON DUPLICATE KEY UPDATE paused = 1, paused_until = FROM_UNIXTIME(%(until_s)s)

-- name: paused
SELECT processo, CAST(UNIX_TIMESTAMP(paused_until) * 1000000 AS SIGNED) AS until_us,
       paused_until IS NOT NULL AND paused_until <= NOW(6) AS expired
FROM {limits_table}
WHERE paused
ORDER BY processo

-- name: wake
-- No NOTIFY: the workers poll (QUEUE_POLL_INTERVAL) or the socket server wakes them.
DO 0
