-- What an executor sends after a task, stored: the server parses one short
-- CALL per task instead of the statements below. With a finished task
-- (p_task_id), its 'sucesso', committed, and the release of its liveness
-- lock; then the claim of the next task with the same order, locking
-- and liveness lock as the plain-SQL claim in queries.sql, which workers use
-- when this procedure is missing or from another version (the COMMENT);
-- then COMMIT AND CHAIN, which commits the claim and opens the next task's
-- transaction. The CALL's one result set is one row, one JSON column: the
-- claimed task with the liveness lock's GET_LOCK result, or NULL when
-- nothing was ready.
-- After a failed call, @nsjq_completed = p_task_id tells the caller that the
-- completion was committed (only the claim failed), and @nsjq_claimed which
-- task's lock the claim may have taken. Neither is reset at the start (a
-- statement per task): a value left by an earlier call names another task,
-- and releasing a lock this session does not hold does nothing.
--
-- Where the claim starts reading. InnoDB leaves the claim index entry of a
-- claimed task in place, delete-marked, until purge removes it, and purge
-- works in batches: during a drain hundreds of such entries lie ahead of the
-- first ready task. A locking read from the start of the 'pendente' range
-- locks every one of them (REPEATABLE READ), and concurrent claims queue on
-- those locks: the server's CPU per task grew with every executor added.
-- So the procedure first finds the first ready task without locks and
-- without a snapshot (READ UNCOMMITTED, for that one statement, which passes
-- delete-marked entries for free), then locks from there on. The look-up
-- needs a statement of its own outside any transaction: that is why the
-- completion commits before the claim. A claim that fails (a deadlock)
-- therefore never takes the finished task's work with it.
--
-- What each task costs is mostly statements (MariaDB spends more on
-- running a statement than on the rows it touches), hence the shape of the
-- claim: the locking read itself builds the row's JSON and takes the
-- liveness lock (status already says 'processando', which the next
-- statement writes), and the result is sent after the commit, so the
-- worker reads the row and the end of the CALL in one go.
DELIMITER //
CREATE PROCEDURE {claim_function}(
    IN p_task_id BIGINT,
    IN p_mensagem VARCHAR(500) CHARACTER SET utf8mb4,
    IN p_lock_prefix VARCHAR(64)
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT '{claim_procedure_version}'
BEGIN
    DECLARE v_prioridade INT;
    DECLARE v_data_hora TIMESTAMP(6);
    DECLARE v_id BIGINT;
    DECLARE v_lookup_failed BOOLEAN DEFAULT FALSE;
    DECLARE v_claimed BIGINT;
    DECLARE v_first_attempt BIGINT;
    DECLARE v_task LONGTEXT CHARACTER SET utf8mb4;
    -- No ready task: SELECT ... INTO assigns nothing, and that is no error here.
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    IF p_task_id IS NOT NULL THEN
        UPDATE {table}
        SET status = 'sucesso', mensagem = p_mensagem
        WHERE id = p_task_id AND status = 'processando';
    END IF;
    -- Also ends the empty transaction a first claim is called in. The
    -- liveness lock goes once the task is 'sucesso' for everyone.
    COMMIT;
    SET @nsjq_completed = p_task_id,
        @nsjq_released = IF(p_task_id IS NULL, NULL, RELEASE_LOCK(CONCAT(p_lock_prefix, p_task_id)));
    BEGIN
        -- If the look-up fails (its index was dropped, say), the claim reads
        -- from the start. A statement that fails before it starts leaves
        -- READ UNCOMMITTED pending for the next transaction: that one gets
        -- the executors' level instead.
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION
        BEGIN
            SET v_lookup_failed = TRUE;
            SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;
        END;
        SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;
        SELECT t.prioridade, t.data_hora, t.id INTO v_prioridade, v_data_hora, v_id
        FROM {table} AS t FORCE INDEX ({idx_claim})
        WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
        ORDER BY t.prioridade DESC, t.data_hora, t.id
        LIMIT 1;
    END;
    START TRANSACTION;
    -- GET_LOCK runs for the one row the claim returns. Later attempts keep
    -- no payload of their own: v_first_attempt says where it is.
    IF v_id IS NOT NULL THEN
        SELECT t.id, t.id, IF(t.payload IS NULL, t.id_inicial, NULL),
               JSON_OBJECT('liveness_locked', GET_LOCK(CONCAT(p_lock_prefix, t.id), 0), {claimed_task_json})
        INTO v_claimed, @nsjq_claimed, v_first_attempt, v_task
        FROM {table} AS t FORCE INDEX ({idx_claim})
        WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
          AND (t.prioridade < v_prioridade OR t.prioridade IS NULL
               OR (t.prioridade = v_prioridade
                   AND (t.data_hora > v_data_hora OR (t.data_hora = v_data_hora AND t.id >= v_id))))
        ORDER BY t.prioridade DESC, t.data_hora, t.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
    ELSEIF v_lookup_failed THEN
        SELECT t.id, t.id, IF(t.payload IS NULL, t.id_inicial, NULL),
               JSON_OBJECT('liveness_locked', GET_LOCK(CONCAT(p_lock_prefix, t.id), 0), {claimed_task_json})
        INTO v_claimed, @nsjq_claimed, v_first_attempt, v_task
        FROM {table} AS t
        WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
        ORDER BY t.prioridade DESC, t.data_hora, t.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
    END IF;
    IF v_claimed IS NOT NULL THEN
        UPDATE {table}
        SET status = 'processando'
        WHERE id = v_claimed;
        IF v_first_attempt IS NOT NULL THEN
            SET v_task = JSON_SET(v_task, '$.payload',
                                  (SELECT f.payload FROM {table} AS f WHERE f.id = v_first_attempt));
        END IF;
    END IF;
    COMMIT AND CHAIN;
    SELECT v_task AS task;
END//
DELIMITER ;
