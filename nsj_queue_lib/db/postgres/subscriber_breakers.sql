-- The webhook subscribers' circuit breakers (docs/fleet-control.md,
-- nsj_queue_lib/fleet/subscriber_breakers.py): the processo breakers'
-- statements (pause.sql) on the subscriber's row of the subscriber table,
-- each run by a worker in a short transaction of its own.

-- name: subscriber_breaker
-- The subscriber's breaker as a delivery finds it: its settings, its state,
-- the seconds until its cool-down ends and since its trial started.
SELECT circuit_breaker_failures, circuit_breaker_cool_down_s, breaker_open, breaker_trial,
       breaker_trial_task,
       extract(epoch FROM breaker_until - clock_timestamp())::float8 AS until_s,
       extract(epoch FROM clock_timestamp() - breaker_trial_at)::float8 AS trial_age_s
FROM {subscriber_table}
WHERE id = %(id)s

-- name: subscriber_breaker_trial
-- The cool-down is over: this delivery is the trial, unless another took it.
UPDATE {subscriber_table}
SET breaker_trial = true, breaker_trial_at = clock_timestamp(), breaker_trial_task = %(task)s
WHERE id = %(id)s AND breaker_open AND NOT breaker_trial AND breaker_until <= clock_timestamp()

-- name: subscriber_breaker_fail
-- One more consecutive failed delivery.
UPDATE {subscriber_table} SET breaker_failures = breaker_failures + 1 WHERE id = %(id)s

-- name: subscriber_breaker_state
-- The breaker as this transaction decides on it (the row locked until it ends).
SELECT breaker_failures, breaker_open, breaker_trial, breaker_trial_task
FROM {subscriber_table}
WHERE id = %(id)s
FOR UPDATE

-- name: subscriber_breaker_open
-- Open: no delivery until the cool-down ends, then one trial.
UPDATE {subscriber_table}
SET breaker_open = true, breaker_trial = false, breaker_failures = 0,
    breaker_trial_at = NULL, breaker_trial_task = NULL,
    breaker_until = clock_timestamp() + %(cool_down_s)s * interval '1 second'
WHERE id = %(id)s

-- name: subscriber_breaker_reset
-- Closed: no failures counted; the held deliveries are due now.
UPDATE {subscriber_table}
SET breaker_open = false, breaker_trial = false, breaker_failures = 0, breaker_until = NULL,
    breaker_trial_at = NULL, breaker_trial_task = NULL
WHERE id = %(id)s

-- name: subscriber_breaker_held
-- The deliveries the breaker held: scheduled attempts whose previous attempt
-- was held (their mensagem_anterior says so). A plain read: the update below
-- then locks these rows only, by their keys (on MySQL/MariaDB an update
-- scanning for them could wait for the rows other transactions hold).
SELECT id
FROM {queue_table}
WHERE status = 'agendada' AND subscriber_id = %(id)s AND status_anterior = 'falha_processando'
  AND mensagem_anterior LIKE %(held_prefix)s

-- name: subscriber_breaker_wake
-- At commit, the workers' dispatchers plan their next promotion again (the
-- released deliveries are due now, not when they were scheduled).
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: subscriber_breaker_undecided
-- The trial ended without telling whether the subscriber works (a refused
-- request): the breaker stays open and the next delivery is the trial.
UPDATE {subscriber_table}
SET breaker_trial = false, breaker_trial_at = NULL, breaker_trial_task = NULL
WHERE id = %(id)s AND breaker_open AND breaker_trial AND breaker_trial_task = %(task)s

-- name: subscriber_breakers
-- The subscribers' breakers with failures counted, or open.
SELECT id, breaker_failures, breaker_open, breaker_trial,
       (extract(epoch FROM breaker_until) * 1000000)::bigint AS until_us,
       breaker_trial_task,
       extract(epoch FROM clock_timestamp() - breaker_trial_at)::float8 AS trial_age_s,
       circuit_breaker_cool_down_s
FROM {subscriber_table}
WHERE breaker_failures > 0 OR breaker_open
ORDER BY id
