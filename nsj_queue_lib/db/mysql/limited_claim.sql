-- The limited claim (per-processo limits, docs/flow-control.md) in one CALL,
-- the steps of PostgreSQL's limited_claim.sql (which says why each is there):
-- a look without locks for the processo whose next start comes first within
-- p_early_s; its limits row locked, its state read again after the lock
-- (READ COMMITTED for this transaction: each read takes a fresh snapshot);
-- SLEEP until the start is due; one ready task marked 'processando' (a task
-- the unique index of running lock keys refuses is skipped, up to
-- {attempts} times) and the processo's state moved on. With p_take_lock the
-- task's liveness lock is taken and the claim committed, the task's own
-- transaction opened (the executors' isolation level, REPEATABLE READ);
-- without it the claim's transaction stays open for the caller (the socket
-- server's lock comes first). Nothing claimed: the transaction is rolled back.
-- The CALL's one result set is one row: the task as JSON (NULL when none,
-- with liveness_locked), wait_s, limits_rows and stale_windows as on
-- PostgreSQL. p_open_windows and p_known_windows are JSON arrays of
-- MD5(processo, newline, time_windows).
DELIMITER //
CREATE PROCEDURE {limited_claim}(
    IN p_open_windows LONGTEXT CHARACTER SET utf8mb4,
    IN p_known_windows LONGTEXT CHARACTER SET utf8mb4,
    IN p_early_s DOUBLE,
    IN p_take_lock BOOLEAN,
    IN p_lock_prefix VARCHAR(64),
    IN p_handled_processos LONGTEXT CHARACTER SET utf8mb4,
    IN p_worker VARCHAR(200) CHARACTER SET utf8mb4
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT '{limited_claim_version}'
BEGIN
    DECLARE v_chosen VARCHAR(250) CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_locked VARCHAR(250) CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_due_in DOUBLE DEFAULT NULL;
    DECLARE v_due_at TIMESTAMP(6) DEFAULT NULL;
    DECLARE v_startable BOOLEAN DEFAULT FALSE;
    DECLARE v_claimed BIGINT DEFAULT NULL;
    DECLARE v_first_attempt BIGINT DEFAULT NULL;
    DECLARE v_task LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_attempt INT DEFAULT 0;
    DECLARE v_keys_lost BOOLEAN DEFAULT FALSE;
    DECLARE v_floor TIMESTAMP(6) DEFAULT NULL;
    DECLARE v_wait DOUBLE DEFAULT NULL;
    DECLARE v_rows BIGINT DEFAULT 0;
    DECLARE v_stale BOOLEAN DEFAULT FALSE;
    -- Nothing found: SELECT ... INTO assigns nothing, and that is no error here.
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    SELECT s.processo, s.due_in INTO v_chosen, v_due_in
    FROM ({limited_states}) AS s
    WHERE NOT s.capped AND (s.due_in IS NULL OR s.due_in <= p_early_s)
    ORDER BY s.due_in IS NOT NULL, s.due_in, s.processo
    LIMIT 1;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    IF v_chosen IS NOT NULL THEN
        SELECT l.processo INTO v_locked FROM {limits_table} AS l WHERE l.processo = v_chosen FOR UPDATE;
        SET v_due_in = NULL;
        SELECT TRUE, s.due_in, TIMESTAMPADD(MICROSECOND, ROUND(1e6 * s.due_in), NOW(6))
        INTO v_startable, v_due_in, v_due_at
        FROM ({limited_states}) AS s
        WHERE s.processo = v_chosen AND NOT s.capped AND (s.due_in IS NULL OR s.due_in <= p_early_s);
    END IF;
    IF v_startable THEN
        IF v_due_in > 0 THEN
            -- To the due moment itself: this statement starts a little after the
            -- one that measured v_due_in.
            DO SLEEP(GREATEST(TIMESTAMPDIFF(MICROSECOND, NOW(6), v_due_at), 0) / 1e6);
        END IF;
        claim: LOOP
            SET v_attempt = v_attempt + 1, v_claimed = NULL, v_keys_lost = FALSE;
            SELECT t.id, IF(t.payload IS NULL, t.id_inicial, NULL), JSON_OBJECT({claimed_task_json})
            INTO v_claimed, v_first_attempt, v_task
            FROM {table} AS t
            WHERE t.processo = v_chosen AND t.status = 'pendente' AND t.data_hora <= NOW(6)
              AND {lock_key_free} AND {trial_candidate} AND {key_headroom}
            ORDER BY t.prioridade DESC, t.data_hora, t.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
            IF v_claimed IS NULL THEN
                LEAVE claim;
            END IF;
            BEGIN
                DECLARE CONTINUE HANDLER FOR 1062 SET v_keys_lost = TRUE;
                UPDATE {table}
                SET status = 'processando', started_at = NOW(6), worker = p_worker
                WHERE id = v_claimed;
            END;
            IF NOT v_keys_lost THEN
                LEAVE claim;
            END IF;
            SET v_claimed = NULL, v_task = NULL;
            IF v_attempt >= {attempts} THEN
                LEAVE claim;
            END IF;
        END LOOP;
    END IF;
    IF v_claimed IS NOT NULL THEN
        -- The rate limiter's credit: at most {catch_up} of the period behind this start.
        SELECT TIMESTAMPADD(MICROSECOND, -ROUND(1e6 * {catch_up} * l.rate_period_s), NOW(6))
        INTO v_floor
        FROM {limits_table} AS l WHERE l.processo = v_chosen;
        UPDATE {limits_table} AS l
        SET l.next_start_at = IF(l.interval_min_s IS NULL, l.next_start_at,
                TIMESTAMPADD(MICROSECOND,
                             ROUND(1e6 * (l.interval_min_s + RAND() * (l.interval_max_s - l.interval_min_s))),
                             NOW(6))),
            l.rate_tat = IF(l.rate_count IS NULL, l.rate_tat,
                TIMESTAMPADD(MICROSECOND, ROUND(1e6 * l.rate_period_s / l.rate_count),
                             IF(l.rate_tat IS NOT NULL AND l.rate_tat > v_floor, l.rate_tat, v_floor))),
            -- An open circuit breaker's task is its trial: no other starts until it is
            -- decided. Its id and start let only its outcome decide, and let a trial
            -- whose outcome never came be told (fleet/breaker_recorder.py).
            l.breaker_trial_at = IF(l.breaker_open, NOW(6), NULL),
            l.breaker_trial_task = IF(l.breaker_open, v_claimed, NULL),
            l.breaker_trial = l.breaker_open
        WHERE l.processo = v_chosen;
        IF v_first_attempt IS NOT NULL THEN
            SET v_task = JSON_SET(v_task, '$.payload',
                                  (SELECT f.payload FROM {table} AS f WHERE f.id = v_first_attempt));
        END IF;
        SET v_task = JSON_SET(v_task, '$.liveness_locked',
                              IF(p_take_lock, GET_LOCK(CONCAT(p_lock_prefix, v_claimed), 0), NULL));
    END IF;
    -- Read before the commit: the task's own transaction takes its snapshot
    -- at its handler's first read.
    SELECT MIN(IF(s.capped, {cap_recheck}, GREATEST(COALESCE(s.due_in, 0), 0))) INTO v_wait
    FROM ({limited_states}) AS s;
    SELECT COUNT(*) INTO v_rows FROM {limits_table};
    SELECT EXISTS (SELECT 1 FROM {limits_table} AS l
                   WHERE l.time_windows IS NOT NULL
                     AND NOT JSON_CONTAINS(p_known_windows,
                                           JSON_QUOTE(MD5(CONCAT(l.processo, CHAR(10), l.time_windows)))))
    INTO v_stale;
    IF v_claimed IS NULL THEN
        ROLLBACK;
    ELSEIF p_take_lock THEN
        COMMIT;
        START TRANSACTION;
    END IF;
    SELECT v_task AS task, v_wait AS wait_s, v_rows AS limits_rows, v_stale AS stale_windows;
END//
DELIMITER ;
