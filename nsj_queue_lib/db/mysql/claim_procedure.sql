-- What an executor sends after a task: one short CALL per task. With a
-- finished task (p_task_id), its 'sucesso', committed, and the release of
-- its liveness lock; then the claim of the next ready task in claim order
-- (prioridade DESC, data_hora, id), skipping rows other claims hold, with
-- its liveness lock taken by this session; then COMMIT AND CHAIN, which
-- commits the claim and opens the task's transaction. Workers check the
-- COMMENT at start and refuse a procedure of another version. The CALL's one
-- result set is one row, one JSON column: the claimed task with the liveness
-- lock's GET_LOCK result, or NULL when nothing was ready.
-- After a failed call, @nsjq_completed = p_task_id tells the caller that the
-- completion was committed (only the claim failed), and @nsjq_claimed which
-- task's lock the claim may have taken. Neither is reset at the start: a
-- value left by an earlier call names another task, and releasing a lock
-- this session does not hold does nothing.
--
-- Where the claim starts reading. InnoDB leaves the claim index entry of a
-- claimed task in place, delete-marked, until purge removes it: during a
-- drain many such entries lie ahead of the first ready task, and a locking
-- read from the start of the 'pendente' range would lock every one of them,
-- queueing concurrent claims behind each other. So the procedure first finds
-- the first ready task without locks and without a snapshot (READ
-- UNCOMMITTED, for that one statement), then locks from there on. The
-- look-up needs a statement of its own outside any transaction: that is why
-- the completion commits before the claim, and why a failing claim never
-- takes the finished task's work with it.
--
-- The look-up is the procedure's most expensive statement, so its answer is
-- reused for 20 ms: until then an executor's claim starts at its own last
-- claimed task (@nsjq_position_*, per queue); between there and the first
-- ready task lie only the tasks other executors claimed since. A task that
-- becomes ready ahead of that position in the meantime (a higher priority, a
-- retry, a task given back) waits for the next look-up: claim order may lag
-- by up to 20 ms, never more. When nothing is ready after the position, the
-- claim looks up at once, so "nothing claimed" always comes from a look-up.
--
-- lock_key: the locking reads skip a task whose key is busy (a task of its
-- key is running or comes first; nsj_queue_lib/flow/lock_keys.py). The
-- look-up does not: it only says where to start reading. A task refused by
-- the unique index of running keys (another claim took its key after this
-- one's snapshot) is given back and the claim starts over, at most 3 times.
--
-- Deliveries (rows with a subscriber_id) are claimed only for the subscribers
-- in p_handled_subscribers, a JSON array (NULL: every subscriber;
-- nsj_queue_lib/flow/deliveries.py), and tasks only of the processos in
-- p_handled_processos (NULL: every processo). The look-up ignores both, as
-- lock_key.
-- Nor do they take a task of a limited processo: only the limited claim does
-- (flow/limits.py).
--
-- Group commit (QUEUE_BATCH_SIZE > 1) sets @nsjq_claim_limit before the CALL
-- (each CALL resets it): the procedure then claims up to that many tasks in
-- one transaction and returns them in claim order (one NULL row when none),
-- their ids also in @nsjq_claimed_batch for the caller to release after a
-- failed CALL (named as their locks are taken). The batch is claimed
-- set-based: one locking read of up to that many rows (their liveness locks
-- taken, and the position set, as it reads them), one UPDATE of their ids,
-- the commit. Each task is a JSON array: the values of model.QUEUE_COLUMNS in
-- that order, then whether its liveness lock was taken (1 or 0); without the
-- names the server builds and the worker parses less per task
-- (db/mysql/rows.py). Usually the locking read builds them as it reads, and
-- the CALL returns one row (column task_rows): the JSON array of the tasks'
-- arrays, one row for the worker to read instead of one per task. The rows
-- are read again after the commit, one per task (column task_row), when
-- what the locking read built will not do: a later attempt needs its first
-- attempt's payload, a liveness lock was held elsewhere, or the text
-- reached about 128 KiB (or max_allowed_packet: CONCAT gives NULL). A task
-- claimed alone stays an object, which the previous release's workers read
-- (previous_claim.sql calls this procedure). MariaDB pays more per statement
-- than per row: one statement per claimed task cost about four times the
-- server CPU of this. If that UPDATE meets the unique index of
-- running keys (two tasks of one lock_key, or a concurrent claim took a
-- key), the batch is undone and claimed one task at a time instead, each
-- claim going on from the previous one's position (the statements between
-- "batch: LOOP" and its end, not re-indented), returned as one JSON array:
-- a lock_key lost to the unique index, or nothing ready after the
-- position, ends that batch. Any error after the first claim of a batch
-- fails the CALL (a deadlock has rolled the whole transaction back).
--
-- The three locking reads' conditions (ready, its lock_key free, deliverable,
-- no limits; the same from the position on) are one text,
-- db/mysql/claim_where.py.
--
-- MariaDB spends more on running a statement than on the rows it touches,
-- hence the claim's shape: the locking read itself builds the row's JSON and
-- takes the liveness lock (status already says 'processando', which the
-- next statement writes), and the result is sent after the commit, so the
-- worker reads the row and the end of the CALL in one go.
-- server: mysql
--
-- This is the MySQL variant (db_gen --server mysql): MySQL 8.0 has no
-- EXECUTE IMMEDIATE and deprecates assigning user variables inside
-- expressions, so the set-based batch reads its rows with a cursor and runs
-- its dynamic statements with PREPARE/EXECUTE. It also runs on MariaDB; the
-- MariaDB variant (the default) costs MariaDB fewer statements per batch.
-- server: end
DELIMITER //
CREATE PROCEDURE {claim_function}(
    IN p_task_id BIGINT,
    IN p_mensagem VARCHAR(500) CHARACTER SET utf8mb4,
    IN p_lock_prefix VARCHAR(64),
    IN p_handled_subscribers LONGTEXT CHARACTER SET utf8mb4,
    IN p_handled_processos LONGTEXT CHARACTER SET utf8mb4,
    IN p_worker VARCHAR(200) CHARACTER SET utf8mb4
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT '{claim_procedure_version}'
BEGIN
    DECLARE v_prioridade INT;
    DECLARE v_data_hora TIMESTAMP(6);
    DECLARE v_id BIGINT;
    DECLARE v_remembered BOOLEAN;
    DECLARE v_lookup_failed BOOLEAN DEFAULT FALSE;
    DECLARE v_claimed BIGINT;
    DECLARE v_first_attempt BIGINT;
    DECLARE v_task LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_keys_lost INT DEFAULT 0;
    DECLARE v_limit INT DEFAULT GREATEST(COALESCE(@nsjq_claim_limit, 1), 1);
    DECLARE v_count INT DEFAULT 0;
    DECLARE v_batch LONGTEXT CHARACTER SET utf8mb4;
    -- The set-based batch: its ids (NULL once undone), how many of its
    -- liveness locks were taken; v_one_by_one after a lock_key conflict.
    DECLARE v_ids LONGTEXT CHARACTER SET ascii;
    DECLARE v_locked INT;
    DECLARE v_min_id BIGINT;
    DECLARE v_max_id BIGINT;
    DECLARE v_one_by_one BOOLEAN DEFAULT FALSE;
    -- The set-based batch's rows as its locking read built them (one JSON
    -- array of arrays), unless a row needs reading again (see below).
    DECLARE v_needs_read INT;
    DECLARE v_rows LONGTEXT CHARACTER SET utf8mb4;
    -- The finished task's first attempt, and whether children wait for it.
    DECLARE v_done_first BIGINT;
    DECLARE v_children INT DEFAULT 0;
    -- No ready task: SELECT ... INTO assigns nothing, and that is no error here.
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    SET @nsjq_claim_limit = NULL, @nsjq_claimed_batch = NULL;
    IF p_task_id IS NOT NULL THEN
        -- Its first attempt's id, read while the row is still in the hot partition: after
        -- the settle moved it to its day's, a read by id alone probed every partition's
        -- primary key (on a partitioned table with 60 days of history, every success).
        SELECT COALESCE(id_inicial, id) INTO v_done_first FROM {table}
        WHERE {hot}id = p_task_id;
        UPDATE {table}
        SET status = 'sucesso', mensagem = p_mensagem, finished_at = NOW(6){finished_day_set}
        WHERE {hot}id = p_task_id AND status = 'processando';
        -- The fence: an attempt that no longer owns its row (another worker
        -- rescued it and runs it again) must not commit its handler's writes.
        IF ROW_COUNT() = 0 THEN
            ROLLBACK;
            DO RELEASE_LOCK(CONCAT(p_lock_prefix, p_task_id));
            SIGNAL SQLSTATE '45000'
                SET MESSAGE_TEXT = 'nsjq fenced: the task is no longer processando';
        END IF;
        -- Its children waiting for it (workflow/dependencies.py), released in the
        -- same commit. A locking read: it sees a child committed after this
        -- transaction's snapshot (the child's insert held the row's lock till then).
        SELECT COUNT(*) INTO v_children FROM {parents_table}
        WHERE parent_id = v_done_first LOCK IN SHARE MODE;
        IF v_children > 0 THEN
            CALL {release_function}(v_done_first);
        END IF;
    END IF;
    -- Also ends the empty transaction a first claim is called in. The
    -- liveness lock goes once the task is 'sucesso' for everyone.
    COMMIT;
    SET @nsjq_completed = p_task_id,
        @nsjq_released = IF(p_task_id IS NULL, NULL, RELEASE_LOCK(CONCAT(p_lock_prefix, p_task_id)));
    -- Where the claim starts: this session's last claim of this queue while
    -- its look-up is recent (data_hora kept as a number: a handler may change
    -- the session's time zone), else the first ready task.
    SET v_remembered = COALESCE(UNIX_TIMESTAMP(NOW(6)) < @nsjq_position_until
                                AND @nsjq_position_queue = p_lock_prefix, FALSE);
    IF v_remembered THEN
        SET v_prioridade = @nsjq_position_prioridade,
            v_data_hora = FROM_UNIXTIME(@nsjq_position_data_hora),
            v_id = @nsjq_position_id;
    END IF;
    batch: LOOP
    claim: LOOP
        IF NOT v_remembered THEN
            BEGIN
                -- If the look-up fails (its index was dropped, say), the claim
                -- reads from the start. A statement that fails before it starts
                -- leaves READ UNCOMMITTED pending for the next transaction: that
                -- one gets the executors' level instead.
                DECLARE CONTINUE HANDLER FOR SQLEXCEPTION
                BEGIN
                    SET v_lookup_failed = TRUE;
                    SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;
                END;
                SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;
                SELECT t.prioridade, t.data_hora, t.id INTO v_prioridade, v_data_hora, v_id
                FROM {table} AS t FORCE INDEX ({idx_claim})
                WHERE {hot_t}t.status = 'pendente' AND t.data_hora <= NOW(6)
                ORDER BY t.prioridade DESC, t.data_hora, t.id
                LIMIT 1;
            END;
            -- No position without the claim index (the look-up failed).
            SET @nsjq_position_queue = IF(v_lookup_failed, NULL, p_lock_prefix),
                @nsjq_position_until = UNIX_TIMESTAMP(NOW(6)) + 0.02;
        END IF;
        IF v_count = 0 THEN
            START TRANSACTION;
        END IF;
        IF v_limit > 1 AND NOT v_one_by_one AND v_id IS NOT NULL THEN
            -- server: mariadb
            -- The batch in one locking read. The derived table's select list
            -- runs for the rows it keeps, no others, in claim order (the claim
            -- index's): each row's id is appended to @nsjq_claimed_batch, then
            -- its liveness lock is taken. So the ids come in claim order
            -- without a GROUP_CONCAT (each aggregate of it costs the server a
            -- temporary table), and a failure, which fails the CALL, leaves
            -- the locks taken so far named for the caller. The tasks' arrays
            -- are appended the same way, to user variables, which keep the
            -- text out of the derived table (its rows stay short). Each append
            -- copies the whole text: to @nsjq_claimed_chunk, moved to the end
            -- of @nsjq_claimed_rows past 32 KiB, so that a row costs a copy of
            -- at most 32 KiB, not of all rows before it. Past about 128 KiB
            -- the copies would cost more than reading the rows again after the
            -- commit: @nsjq_claimed_rows becomes NULL, which stops the appends
            -- and makes the rows read again.
            -- (Not "x IS NULL" of an expression that cannot be NULL: MariaDB
            -- answers FALSE without evaluating it, the assignment with it.)
            -- The position is set to each row read: the last one's stays.
            SET @nsjq_claimed_rows = '', @nsjq_claimed_chunk = '';
            SELECT COUNT(c.listed), SUM(c.locked = 1), MIN(c.id), MAX(c.id), SUM(c.needs_read)
            INTO v_count, v_locked, v_min_id, v_max_id, v_needs_read
            FROM (
                    SELECT t.id,
                           CONCAT_WS(',', @nsjq_claimed_batch := CONCAT_WS(',', @nsjq_claimed_batch, t.id),
                                     @nsjq_position_prioridade := t.prioridade,
                                     @nsjq_position_data_hora := UNIX_TIMESTAMP(t.data_hora),
                                     @nsjq_position_id := t.id) IS NOT NULL AS listed,
                           GET_LOCK(CONCAT(p_lock_prefix, t.id), 0) AS locked,
                           (@nsjq_claimed_chunk := IF(@nsjq_claimed_rows IS NULL, NULL,
                                                      CONCAT(@nsjq_claimed_chunk, ',',
                                                             JSON_ARRAY({claimed_task_values}, 1)))) IS NULL
                               OR (LENGTH(@nsjq_claimed_chunk) > 32768
                                   AND ((@nsjq_claimed_rows := IF(LENGTH(@nsjq_claimed_rows) > 98304, NULL,
                                                                  CONCAT(@nsjq_claimed_rows, @nsjq_claimed_chunk))) IS NULL
                                        OR LENGTH(@nsjq_claimed_chunk := '') > 0))
                               OR (t.payload IS NULL AND t.id_inicial IS NOT NULL) AS needs_read
                    FROM {table} AS t FORCE INDEX ({idx_claim})
                    WHERE {claimable_after_position}
                    ORDER BY t.prioridade DESC, t.data_hora, t.id
                    LIMIT v_limit
                    FOR UPDATE SKIP LOCKED
            ) AS c;
            -- server: mysql
            -- MySQL 8 deprecates assigning user variables inside expressions,
            -- so this variant reads the batch with a cursor: its locking read
            -- locks the rows (OPEN), then each row, in claim order, is named
            -- in @nsjq_claimed_batch, its liveness lock taken, its array
            -- appended and the position set, one SET at a time. The same
            -- results as the MariaDB variant's one statement (text that would
            -- pass 128 KiB makes the rows read again after the commit).
            BEGIN
                DECLARE v_done BOOLEAN DEFAULT FALSE;
                DECLARE v_row_id BIGINT;
                DECLARE v_row_prioridade INT;
                DECLARE v_row_data_hora DECIMAL(24, 6);
                DECLARE v_row LONGTEXT CHARACTER SET utf8mb4;
                DECLARE v_row_needs_read INT;
                DECLARE v_row_locked INT;
                DECLARE c_batch CURSOR FOR
                    SELECT t.id, t.prioridade, UNIX_TIMESTAMP(t.data_hora),
                           JSON_ARRAY({claimed_task_values}, 1),
                           t.payload IS NULL AND t.id_inicial IS NOT NULL
                    FROM {table} AS t FORCE INDEX ({idx_claim})
                    WHERE {claimable_after_position}
                    ORDER BY t.prioridade DESC, t.data_hora, t.id
                    LIMIT v_limit
                    FOR UPDATE SKIP LOCKED;
                DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;
                SET @nsjq_claimed_rows = '', @nsjq_claimed_chunk = '',
                    v_count = 0, v_locked = 0, v_needs_read = 0, v_min_id = NULL, v_max_id = NULL;
                OPEN c_batch;
                batch_rows: LOOP
                    FETCH c_batch INTO v_row_id, v_row_prioridade, v_row_data_hora, v_row, v_row_needs_read;
                    IF v_done THEN
                        LEAVE batch_rows;
                    END IF;
                    SET @nsjq_claimed_batch = CONCAT_WS(',', @nsjq_claimed_batch, v_row_id);
                    SET v_row_locked = GET_LOCK(CONCAT(p_lock_prefix, v_row_id), 0);
                    SET v_count = v_count + 1,
                        v_locked = v_locked + IF(v_row_locked = 1, 1, 0),
                        v_min_id = LEAST(COALESCE(v_min_id, v_row_id), v_row_id),
                        v_max_id = GREATEST(COALESCE(v_max_id, v_row_id), v_row_id),
                        @nsjq_position_prioridade = v_row_prioridade,
                        @nsjq_position_data_hora = v_row_data_hora,
                        @nsjq_position_id = v_row_id,
                        @nsjq_claimed_rows = IF(LENGTH(@nsjq_claimed_rows) + LENGTH(v_row) > 131072, NULL,
                                                CONCAT(@nsjq_claimed_rows, ',', v_row));
                    SET v_needs_read = v_needs_read + COALESCE(v_row_needs_read, 0)
                                       + IF(@nsjq_claimed_rows IS NULL, 1, 0);
                END LOOP;
                CLOSE c_batch;
            END;
            -- server: end
            IF v_count > 0 THEN
                SET v_ids = @nsjq_claimed_batch;
                BEGIN
                    DECLARE CONTINUE HANDLER FOR 1062 SET v_one_by_one = TRUE;
                    -- v_ids: the table's own BIGINT ids, digits and commas only.
                    -- server: mariadb
                    EXECUTE IMMEDIATE CONCAT('UPDATE {table} SET status = ''processando'', started_at = NOW(6), worker = ? WHERE {hot}id IN (', v_ids, ')')
                        USING p_worker;
                    -- server: mysql
                    SET @nsjq_statement = CONCAT('UPDATE {table} SET status = ''processando'', started_at = NOW(6), worker = ? WHERE {hot}id IN (', v_ids, ')'),
                        @nsjq_worker = p_worker;
                    PREPARE nsjq_claim_statement FROM @nsjq_statement;
                    EXECUTE nsjq_claim_statement USING @nsjq_worker;
                    DEALLOCATE PREPARE nsjq_claim_statement;
                    SET @nsjq_statement = NULL;
                    -- server: end
                END;
                IF v_one_by_one THEN
                    -- Undo the batch, its liveness locks too, and claim one by one.
                    ROLLBACK;
                    SELECT COUNT(RELEASE_LOCK(CONCAT(p_lock_prefix, j.id))) INTO v_count
                    FROM JSON_TABLE(CONCAT('[', v_ids, ']'), '$[*]' COLUMNS (id BIGINT PATH '$')) AS j;
                    SET @nsjq_claimed_batch = NULL, v_count = 0, v_ids = NULL,
                        @nsjq_claimed_rows = NULL, @nsjq_claimed_chunk = NULL,
                        @nsjq_position_prioridade = v_prioridade,
                        @nsjq_position_data_hora = UNIX_TIMESTAMP(v_data_hora),
                        @nsjq_position_id = v_id,
                        v_remembered = FALSE, v_id = NULL;
                    ITERATE claim;
                END IF;
            ELSE
                SET v_ids = NULL;
            END IF;
        -- GET_LOCK runs for the one row the claim returns. Later attempts keep
        -- no payload of their own: v_first_attempt says where it is.
        ELSEIF v_id IS NOT NULL THEN
            BEGIN
                -- A claim from a remembered position that fails (a deadlock,
                -- the claim index dropped) starts over from a look-up; the
                -- liveness lock it may have taken goes first.
                DECLARE CONTINUE HANDLER FOR SQLEXCEPTION
                BEGIN
                    IF NOT v_remembered OR v_count > 0 THEN
                        RESIGNAL;
                    END IF;
                    SET v_claimed = NULL,
                        @nsjq_released = RELEASE_LOCK(CONCAT(p_lock_prefix, @nsjq_claimed));
                END;
                SELECT t.id, t.id, IF(t.payload IS NULL, t.id_inicial, NULL),
                       JSON_OBJECT('liveness_locked', GET_LOCK(CONCAT(p_lock_prefix, t.id), 0), {claimed_task_json}),
                       t.prioridade, UNIX_TIMESTAMP(t.data_hora), t.id
                INTO v_claimed, @nsjq_claimed, v_first_attempt, v_task,
                     @nsjq_position_prioridade, @nsjq_position_data_hora, @nsjq_position_id
                FROM {table} AS t FORCE INDEX ({idx_claim})
                WHERE {claimable_after_position}
                ORDER BY t.prioridade DESC, t.data_hora, t.id
                LIMIT 1
                FOR UPDATE SKIP LOCKED;
            END;
        ELSEIF v_lookup_failed THEN
            SELECT t.id, t.id, IF(t.payload IS NULL, t.id_inicial, NULL),
                   JSON_OBJECT('liveness_locked', GET_LOCK(CONCAT(p_lock_prefix, t.id), 0), {claimed_task_json}),
                   t.prioridade, UNIX_TIMESTAMP(t.data_hora), t.id
            INTO v_claimed, @nsjq_claimed, v_first_attempt, v_task,
                 @nsjq_position_prioridade, @nsjq_position_data_hora, @nsjq_position_id
            FROM {table} AS t
            WHERE {claimable}
            ORDER BY t.prioridade DESC, t.data_hora, t.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
        END IF;
        IF v_claimed IS NOT NULL THEN
            BEGIN
                -- Refused by the unique index of running keys: a concurrent claim
                -- took this task's lock_key after this claim's snapshot saw it
                -- free. Undo, and claim again with a snapshot that sees it busy.
                DECLARE CONTINUE HANDLER FOR 1062
                    SET v_keys_lost = v_keys_lost + 1, v_claimed = NULL;
                UPDATE {table}
                SET status = 'processando', started_at = NOW(6), worker = p_worker
                WHERE {hot}id = v_claimed;
            END;
            IF v_claimed IS NULL AND v_count > 0 THEN
                SET @nsjq_released = RELEASE_LOCK(CONCAT(p_lock_prefix, @nsjq_claimed));
                LEAVE claim;
            END IF;
            IF v_claimed IS NULL THEN
                ROLLBACK;
                SET @nsjq_released = RELEASE_LOCK(CONCAT(p_lock_prefix, @nsjq_claimed)),
                    v_remembered = FALSE, v_id = NULL, v_task = NULL;
                IF v_keys_lost >= 3 THEN
                    LEAVE claim;
                END IF;
                ITERATE claim;
            END IF;
        END IF;
        IF v_claimed IS NOT NULL OR NOT v_remembered OR v_count > 0 THEN
            LEAVE claim;
        END IF;
        -- Nothing ready after the position: look from the first ready task.
        ROLLBACK;
        SET v_remembered = FALSE, v_id = NULL;
    END LOOP;
    IF v_claimed IS NOT NULL THEN
        IF v_first_attempt IS NOT NULL THEN
            SET v_task = JSON_SET(v_task, '$.payload',
                                  (SELECT f.payload FROM {table} AS f WHERE f.id = v_first_attempt));
        END IF;
    END IF;
    IF v_limit > 1 AND v_claimed IS NOT NULL THEN
        SET v_count = v_count + 1, v_batch = CONCAT_WS(',', v_batch, v_task),
            @nsjq_claimed_batch = CONCAT_WS(',', @nsjq_claimed_batch, v_claimed);
        IF v_count < v_limit THEN
            SET v_remembered = TRUE, v_prioridade = @nsjq_position_prioridade,
                v_data_hora = FROM_UNIXTIME(@nsjq_position_data_hora), v_id = @nsjq_position_id,
                v_claimed = NULL, v_first_attempt = NULL, v_task = NULL, v_keys_lost = 0;
            ITERATE batch;
        END IF;
    END IF;
    LEAVE batch;
    END LOOP batch;
    IF v_ids IS NOT NULL THEN
        -- The set-based batch: the arrays its locking read built, in one row,
        -- when every liveness lock was taken and no row needs reading again;
        -- else its rows as committed, one JSON array each (the values of
        -- QUEUE_COLUMNS in order, then the liveness lock's result: 1 when
        -- every lock was taken, else whether this session holds the task's).
        SET v_rows = IF(v_needs_read = 0 AND v_locked = v_count,
                        CONCAT('[', SUBSTRING(CONCAT(@nsjq_claimed_rows, @nsjq_claimed_chunk), 2), ']'),
                        NULL),
            @nsjq_claimed_rows = NULL, @nsjq_claimed_chunk = NULL;
        COMMIT AND CHAIN;
        IF v_rows IS NOT NULL THEN
            SELECT v_rows AS task_rows;
        ELSEIF v_max_id - v_min_id < 2 * v_count THEN
            -- Ids close together (a drain in order, the usual case): a static
            -- statement reading that stretch of the primary key costs the
            -- server less than building, parsing and planning one with the
            -- ids in it; FIND_IN_SET keeps the batch's rows only.
            SELECT JSON_ARRAY({task_values},
                              IF(v_locked = v_count, 1,
                                 IS_USED_LOCK(CONCAT(p_lock_prefix, t.id)) <=> CONNECTION_ID())) AS task_row
            FROM {table} AS t
            LEFT JOIN {table} AS first_attempt
                ON first_attempt.id = t.id_inicial AND t.payload IS NULL
            WHERE {hot_t}t.id BETWEEN v_min_id AND v_max_id AND FIND_IN_SET(t.id, v_ids)
            ORDER BY t.prioridade DESC, t.data_hora, t.id;
        ELSE
            -- server: mariadb
            EXECUTE IMMEDIATE CONCAT(
                'SELECT JSON_ARRAY({task_values_sql}, ',
                IF(v_locked = v_count, '1',
                   CONCAT('IS_USED_LOCK(CONCAT(', QUOTE(p_lock_prefix), ', t.id)) <=> CONNECTION_ID()')),
                ') AS task_row FROM {table} AS t LEFT JOIN {table} AS first_attempt',
                ' ON first_attempt.id = t.id_inicial AND t.payload IS NULL WHERE {hot_t}t.id IN (', v_ids,
                ') ORDER BY t.prioridade DESC, t.data_hora, t.id');
            -- server: mysql
            SET @nsjq_statement = CONCAT(
                'SELECT JSON_ARRAY({task_values_sql}, ',
                IF(v_locked = v_count, '1',
                   CONCAT('IS_USED_LOCK(CONCAT(', QUOTE(p_lock_prefix), ', t.id)) <=> CONNECTION_ID()')),
                ') AS task_row FROM {table} AS t LEFT JOIN {table} AS first_attempt',
                ' ON first_attempt.id = t.id_inicial AND t.payload IS NULL WHERE {hot_t}t.id IN (', v_ids,
                ') ORDER BY t.prioridade DESC, t.data_hora, t.id');
            PREPARE nsjq_claim_statement FROM @nsjq_statement;
            EXECUTE nsjq_claim_statement;
            DEALLOCATE PREPARE nsjq_claim_statement;
            SET @nsjq_statement = NULL;
            -- server: end
        END IF;
    ELSE
        IF v_limit > 1 THEN
            SET v_task = IF(v_count = 0, NULL, CONCAT('[', v_batch, ']'));
        END IF;
        COMMIT AND CHAIN;
        SELECT v_task AS task;
    END IF;
END//
DELIMITER ;
