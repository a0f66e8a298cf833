-- The webhook subscribers' circuit breakers (docs/fleet-control.md,
-- nsj_queue_lib/fleet/subscriber_breakers.py): the processo breakers'
-- statements (pause.sql) on the subscriber's row of the subscriber table,
-- each run by a worker in a short transaction of its own. breaker_until and
-- breaker_trial_at are UTC DATETIMEs, on UTC_TIMESTAMP(6) (subscriber_table.sql).

-- name: subscriber_breaker
SELECT circuit_breaker_failures, circuit_breaker_cool_down_s, breaker_open, breaker_trial,
       breaker_trial_task,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), breaker_until) / 1e6 AS until_s,
       TIMESTAMPDIFF(MICROSECOND, breaker_trial_at, UTC_TIMESTAMP(6)) / 1e6 AS trial_age_s
FROM {subscriber_table}
WHERE id = %(id)s

-- name: subscriber_breaker_trial
UPDATE {subscriber_table}
SET breaker_trial = 1, breaker_trial_at = UTC_TIMESTAMP(6), breaker_trial_task = %(task)s
WHERE id = %(id)s AND breaker_open AND NOT breaker_trial AND breaker_until <= UTC_TIMESTAMP(6)

-- name: subscriber_breaker_fail
UPDATE {subscriber_table} SET breaker_failures = breaker_failures + 1 WHERE id = %(id)s

-- name: subscriber_breaker_state
SELECT breaker_failures, breaker_open, breaker_trial, breaker_trial_task
FROM {subscriber_table}
WHERE id = %(id)s
FOR UPDATE

-- name: subscriber_breaker_open
UPDATE {subscriber_table}
SET breaker_open = 1, breaker_trial = 0, breaker_failures = 0,
    breaker_trial_at = NULL, breaker_trial_task = NULL,
    breaker_until = TIMESTAMPADD(MICROSECOND, ROUND(%(cool_down_s)s * 1000000), UTC_TIMESTAMP(6))
WHERE id = %(id)s

-- name: subscriber_breaker_reset
UPDATE {subscriber_table}
SET breaker_open = 0, breaker_trial = 0, breaker_failures = 0, breaker_until = NULL,
    breaker_trial_at = NULL, breaker_trial_task = NULL
WHERE id = %(id)s

-- name: subscriber_breaker_held
SELECT id
FROM {queue_table}
WHERE status = 'agendada' AND subscriber_id = %(id)s AND status_anterior = 'falha_processando'
  AND mensagem_anterior LIKE %(held_prefix)s

-- name: subscriber_breaker_wake
-- Nothing to wake: the workers poll (QUEUE_POLL_INTERVAL).
SELECT %(channel)s, %(payload)s

-- name: subscriber_breaker_undecided
UPDATE {subscriber_table}
SET breaker_trial = 0, breaker_trial_at = NULL, breaker_trial_task = NULL
WHERE id = %(id)s AND breaker_open AND breaker_trial AND breaker_trial_task = %(task)s

-- name: subscriber_breakers
SELECT id, breaker_failures, breaker_open, breaker_trial,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', breaker_until) AS SIGNED) AS until_us,
       breaker_trial_task,
       TIMESTAMPDIFF(MICROSECOND, breaker_trial_at, UTC_TIMESTAMP(6)) / 1e6 AS trial_age_s,
       circuit_breaker_cool_down_s
FROM {subscriber_table}
WHERE breaker_failures > 0 OR breaker_open
ORDER BY id
