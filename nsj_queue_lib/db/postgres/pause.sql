-- Pause and resume (docs/fleet-control.md, nsj_queue_lib/fleet/pause.py): a
-- pause is a row of the limits table, the processo's own (or '' for the whole
-- queue), with paused = true until paused_until (NULL: until resumed). The
-- claims read it with the limits (db/conditions.py, db/postgres/claim_sets.py).

-- name: pause
INSERT INTO {limits_table} (processo, paused, paused_until, declared_by)
VALUES (%(processo)s, true, to_timestamp(0) + %(until_us)s::bigint * interval '1 microsecond', %(by)s)
ON CONFLICT (processo) DO UPDATE
SET paused = true, paused_until = EXCLUDED.paused_until

-- name: resume
UPDATE {limits_table} SET paused = false, paused_until = NULL
WHERE processo = %(processo)s AND paused

-- name: forget
-- A pause row without limits is gone once resumed (or expired): the limits
-- table keeps the rows of limited processos only.
DELETE FROM {limits_table}
WHERE processo = %(processo)s AND NOT paused AND NOT breaker_open AND breaker_failures = 0
  AND max_concurrent IS NULL AND rate_count IS NULL AND interval_min_s IS NULL
  AND time_windows IS NULL AND max_concurrent_per_key IS NULL

-- name: paused
-- The pauses in force, the whole queue's ('') first.
SELECT processo, (extract(epoch FROM paused_until) * 1000000)::bigint AS until_us,
       paused_until IS NOT NULL AND paused_until <= clock_timestamp() AS expired
FROM {limits_table}
WHERE paused
ORDER BY processo

-- name: wake
-- A resume wakes the queue's workers at commit (the insert trigger's channel).
SELECT pg_notify(%(channel)s, '')

-- Circuit breakers (nsj_queue_lib/fleet/breakers.py), in the processo's limits
-- row, written by each worker's breaker thread in transactions of its own.

-- name: breaker_fail
-- One more consecutive failure of the processo.
INSERT INTO {limits_table} (processo, breaker_failures, declared_by)
VALUES (%(processo)s, 1, %(by)s)
ON CONFLICT (processo) DO UPDATE SET breaker_failures = {limits_table}.breaker_failures + 1

-- name: breaker_state
-- The breaker as this transaction decides on it (the row locked until it ends).
SELECT breaker_failures, breaker_open, breaker_trial, breaker_trial_task
FROM {limits_table}
WHERE processo = %(processo)s
FOR UPDATE

-- name: breaker_open
-- Open: no task starts until the cool-down ends, then one trial (the limited claim).
UPDATE {limits_table}
SET breaker_open = true, breaker_trial = false, breaker_failures = 0,
    breaker_trial_at = NULL, breaker_trial_task = NULL,
    breaker_until = clock_timestamp() + %(cool_down_s)s * interval '1 second'
WHERE processo = %(processo)s

-- name: breaker_reset
-- Closed: no failures counted, the ordinary claims take the processo again.
UPDATE {limits_table}
SET breaker_open = false, breaker_trial = false, breaker_failures = 0, breaker_until = NULL,
    breaker_trial_at = NULL, breaker_trial_task = NULL
WHERE processo = %(processo)s

-- name: breaker_undecided
-- The trial ended without an outcome (cancelled, released at a worker's stop,
-- given up after its timeout): the breaker stays open and the limited claim
-- may take another trial at once (its cool-down is over).
UPDATE {limits_table}
SET breaker_trial = false, breaker_trial_at = NULL, breaker_trial_task = NULL
WHERE processo = %(processo)s AND breaker_open AND breaker_trial
  AND breaker_trial_task = %(task)s

-- name: breakers
-- The breakers with failures counted, or open.
-- With a trial: its task and the seconds since it started (the database's clock).
-- The queue table is not read here: a look-up by id alone is planned over every
-- day partition of the partitioned layout (45 ms at 78 of them), for each nsjq
-- status and each new recorder session, trial or not (trial_timeouts).
SELECT l.processo, l.breaker_failures, l.breaker_open, l.breaker_trial,
       (extract(epoch FROM l.breaker_until) * 1000000)::bigint AS until_us,
       l.breaker_trial_task,
       extract(epoch FROM clock_timestamp() - l.breaker_trial_at)::float8 AS trial_age_s
FROM {limits_table} AS l
WHERE l.breaker_failures > 0 OR l.breaker_open
ORDER BY l.processo

-- name: trial_timeouts
-- The trial tasks' own timeout_s (NULL: their processo's), from which the recorder
-- tells a trial whose outcome never came.
SELECT t.id, t.timeout_s
FROM {table} AS t
WHERE t.id = ANY(%(ids)s::bigint[])
