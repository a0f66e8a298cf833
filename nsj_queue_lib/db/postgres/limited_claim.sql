-- The limited claim (per-processo limits, docs/flow-control.md): the next
-- start of a limited processo, in one call, in the caller's transaction.
-- 1. Without locks, the processo whose next start comes first among those
--    with a ready task, if it comes within early_s seconds (most calls end
--    here: nothing may start yet).
-- 2. Its limits row locked (waiting for a claim of it that holds the row),
--    then its state read again by a statement of its own, whose snapshot is
--    taken after the lock: the count of its running tasks cannot miss
--    another claim's task.
-- 3. The wait until the start is due, here, holding the row: the worker
--    calls up to early_s ahead, and the task starts at the due moment of the
--    database's clock (pg_sleep wakes up to a millisecond late: it sleeps to
--    a millisecond before, then looks at the clock until the moment).
-- 4. One ready task of the processo in claim order marked 'processando'
--    (one the unique index of running lock keys refuses is skipped: another
--    claim took its key after this statement's snapshot; the next statement
--    sees the key busy; one whose fair_key is at max_concurrent_per_key is
--    passed over, not claimed), and the processo's state moved on: the next start
--    interval_s allows, drawn from [min, max] after this start, and the rate
--    limiter's theoretical arrival time, which a late start may leave at
--    most {catch_up} of the period behind it.
-- The row returned: the task (all NULL when none), the first attempt's
-- payload when the task has none, its liveness lock (take_lock), the seconds
-- until the next start may be due (NULL: no limited processo has a ready
-- task; a processo at its max_concurrent, or whose every ready task's fair_key
-- is at max_concurrent_per_key, counts {cap_recheck} s), the number of
-- limits rows, and whether a processo has time windows the worker does not
-- know (it reads the declarations again). Time windows are judged by the
-- worker: open_windows and known_windows hold md5(processo, newline,
-- time_windows) of the open ones and of all it knows (flow/limits.py).
CREATE OR REPLACE FUNCTION {limited_claim}(
    open_windows text[], known_windows text[], early_s double precision, take_lock boolean,
    lock_queue_key integer, handled_processos varchar[], worker_name varchar
)
RETURNS TABLE (task {table}, first_payload text, liveness_locked boolean, wait_s double precision,
               limits_rows bigint, stale_windows boolean)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_chosen varchar;
    v_due_in double precision;
    v_due_at timestamptz;
    v_claimed {table};
    v_first_payload text;
BEGIN
    SELECT s.processo, s.due_in INTO v_chosen, v_due_in
    FROM ({limited_states}) AS s
    WHERE NOT s.capped AND (s.due_in IS NULL OR s.due_in <= early_s)
    ORDER BY s.due_in NULLS FIRST, s.processo
    LIMIT 1;
    IF v_chosen IS NOT NULL THEN
        PERFORM 1 FROM {limits_table} AS l WHERE l.processo = v_chosen FOR UPDATE;
        SELECT s.due_in INTO v_due_in
        FROM ({limited_states}) AS s
        WHERE s.processo = v_chosen AND NOT s.capped AND (s.due_in IS NULL OR s.due_in <= early_s);
        IF NOT FOUND THEN
            v_chosen := NULL;
        END IF;
    END IF;
    IF v_chosen IS NOT NULL THEN
        IF v_due_in > 0 THEN
            v_due_at := clock_timestamp() + v_due_in * interval '1 second';
            IF v_due_in > 0.002 THEN
                PERFORM pg_sleep(v_due_in - 0.001);
            END IF;
            WHILE clock_timestamp() < v_due_at LOOP
            END LOOP;
        END IF;
        FOR attempt IN 1..{attempts} LOOP
            BEGIN
                WITH picked AS (
                    SELECT t.id
                    FROM {table} AS t
                    WHERE {hot_t}t.processo = v_chosen AND t.status = 'pendente'
                      AND t.data_hora <= clock_timestamp() AND {lock_key_free}
                      AND {trial_candidate} AND {key_headroom}
                    ORDER BY t.prioridade DESC, t.data_hora, t.id
                    LIMIT 1
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE {table} AS t
                SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
                FROM picked
                WHERE {hot_t}t.id = picked.id
                RETURNING t.* INTO v_claimed;
                EXIT;
            EXCEPTION WHEN unique_violation THEN
                v_claimed := NULL;
            END;
        END LOOP;
        IF v_claimed.id IS NOT NULL THEN
            UPDATE {limits_table} AS l
            SET next_start_at = CASE
                    WHEN l.interval_min_s IS NULL THEN l.next_start_at
                    ELSE clock_timestamp() + (l.interval_min_s
                         + random() * (l.interval_max_s - l.interval_min_s)) * interval '1 second'
                END,
                rate_tat = CASE
                    WHEN l.rate_count IS NULL THEN l.rate_tat
                    ELSE GREATEST(l.rate_tat,
                                  clock_timestamp() - {catch_up} * l.rate_period_s * interval '1 second')
                         + l.rate_period_s / l.rate_count * interval '1 second'
                END,
                -- An open circuit breaker's task is its trial: no other starts until it is
                -- decided. Its id and start let only its outcome decide, and let a trial
                -- whose outcome never came be told (fleet/breaker_recorder.py).
                breaker_trial = l.breaker_open,
                breaker_trial_at = CASE WHEN l.breaker_open THEN clock_timestamp() END,
                breaker_trial_task = CASE WHEN l.breaker_open THEN v_claimed.id END
            WHERE l.processo = v_chosen;
        END IF;
    END IF;
    -- A retry's payload, on its first attempt, by a statement of its own run for
    -- retries only: in the statement below it put every day partition in its plan.
    IF v_claimed.payload IS NULL AND v_claimed.id_inicial IS NOT NULL THEN
        SELECT f.payload INTO v_first_payload FROM {table} AS f WHERE f.id = v_claimed.id_inicial;
    END IF;
    RETURN QUERY
    SELECT v_claimed,
           v_first_payload,
           CASE WHEN take_lock AND v_claimed.id IS NOT NULL
                THEN pg_try_advisory_lock(lock_queue_key, (v_claimed.id % 2147483648)::int4) END,
           (SELECT min(CASE WHEN s.capped THEN {cap_recheck} ELSE GREATEST(s.due_in, 0) END)
            FROM ({limited_states}) AS s),
           (SELECT count(*) FROM {limits_table}),
           EXISTS (SELECT 1 FROM {limits_table} AS l
                   WHERE l.time_windows IS NOT NULL
                     AND NOT md5(l.processo || chr(10) || l.time_windows) = ANY(known_windows));
END;
$$;
-- Workers check this at start: a function of another version stops them
-- with a message naming db_gen --upgrade.
COMMENT ON FUNCTION {limited_claim}(text[], text[], double precision, boolean, integer, varchar[], varchar)
    IS '{limited_claim_version}';
