-- Per-processo limits (docs/flow-control.md): one row per limited processo,
-- written by the workers at start from their @Task declarations, with the
-- state the limited claim shares across the cluster (the next start an
-- interval allows, the rate limiter's theoretical arrival time).
CREATE TABLE {if_not_exists}{limits_table} (
    processo varchar(250) NOT NULL PRIMARY KEY,
    max_concurrent integer,
    rate_count integer,
    rate_period_s double precision,
    interval_min_s double precision,
    interval_max_s double precision,
    time_windows varchar(4000),
    next_start_at timestamp with time zone,
    rate_tat timestamp with time zone,
    declared_by varchar(200),
    declared_at timestamp with time zone NOT NULL DEFAULT clock_timestamp(),
    -- A pause (docs/fleet-control.md): no task of the processo ('' : of the
    -- queue) starts while paused, until paused_until (NULL: until resumed).
    paused boolean NOT NULL DEFAULT false,
    paused_until timestamp with time zone,
    -- The processo's circuit breaker (docs/fleet-control.md): its consecutive
    -- failures; open (no task starts until breaker_until, then one trial at a
    -- time); the trial started and not decided yet, when it started and its
    -- task (only that task's outcome decides; a trial undecided for too long
    -- counts as failed: fleet/breaker_recorder.py).
    breaker_failures integer NOT NULL DEFAULT 0,
    breaker_open boolean NOT NULL DEFAULT false,
    breaker_until timestamp with time zone,
    breaker_trial boolean NOT NULL DEFAULT false,
    breaker_trial_at timestamp with time zone,
    breaker_trial_task bigint,
    -- At most this many running tasks of the processo per fair_key (NULL: no
    -- cap; unkeyed tasks are never counted). Last: --upgrade appends it.
    max_concurrent_per_key integer
);
