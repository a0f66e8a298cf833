-- Per-processo limits (docs/flow-control.md): one row per limited processo,
-- written by the workers at start from their @Task declarations, with the
-- state the limited claim shares across the cluster (the next start an
-- interval allows, the rate limiter's theoretical arrival time).
CREATE TABLE {if_not_exists}{limits_table} (
    processo varchar(250) NOT NULL PRIMARY KEY,
    max_concurrent integer NULL,
    rate_count integer NULL,
    rate_period_s double NULL,
    interval_min_s double NULL,
    interval_max_s double NULL,
    time_windows varchar(4000) NULL,
    next_start_at timestamp(6) NULL,
    rate_tat timestamp(6) NULL,
    declared_by varchar(200) NULL,
    declared_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    -- A pause (docs/fleet-control.md): no task of the processo ('' : of the
    -- queue) starts while paused, until paused_until (NULL: until resumed).
    -- paused_until is a UTC DATETIME, not a TIMESTAMP: an operator's until may
    -- lie past 2038 (a TIMESTAMP's end), and it is written and compared in
    -- UTC whatever the session's time zone (no daylight-saving fold).
    paused boolean NOT NULL DEFAULT false,
    paused_until datetime(6) NULL,
    -- The processo's circuit breaker (docs/fleet-control.md): its consecutive
    -- failures; open (no task starts until breaker_until, then one trial at a
    -- time); the trial started and not decided yet, when it started and its
    -- task (only that task's outcome decides; a trial undecided for too long
    -- counts as failed: fleet/breaker_recorder.py).
    breaker_failures integer NOT NULL DEFAULT 0,
    breaker_open boolean NOT NULL DEFAULT false,
    breaker_until timestamp(6) NULL,
    breaker_trial boolean NOT NULL DEFAULT false,
    breaker_trial_at timestamp(6) NULL,
    breaker_trial_task bigint NULL,
    -- At most this many running tasks of the processo per fair_key (NULL: no
    -- cap; unkeyed tasks are never counted). Last: --upgrade appends it.
    max_concurrent_per_key integer NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
