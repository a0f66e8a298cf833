-- What an executor sends after a task, stored: the server parses one short
-- CALL per task instead of the statements below. With a finished task
-- (p_task_id), its 'sucesso' and the release of its liveness lock; then the
-- claim of the next task with the same order, locking and liveness lock as
-- the plain-SQL claim in queries.sql, which workers use when this procedure
-- is missing or from another version (the COMMENT); then COMMIT AND CHAIN,
-- which commits both and opens the next task's transaction. The claimed row
-- (none when nothing was ready) is the CALL's one result set.
-- @nsjq_completed tells a failed call's caller whether the completion ran,
-- @nsjq_claimed which task's lock the claim may have taken.
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
    -- No ready task: SELECT ... INTO assigns nothing, and that is no error here.
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    SET @nsjq_completed = 0, @nsjq_claimed = NULL;
    IF p_task_id IS NOT NULL THEN
        UPDATE {table}
        SET status = 'sucesso', mensagem = p_mensagem
        WHERE id = p_task_id AND status = 'processando';
        DO RELEASE_LOCK(CONCAT(p_lock_prefix, p_task_id));
        SET @nsjq_completed = 1;
    END IF;
    SELECT t.id INTO @nsjq_claimed
    FROM {table} AS t
    WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
    ORDER BY t.prioridade DESC, t.data_hora, t.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    UPDATE {table}
    SET status = 'processando'
    WHERE id = @nsjq_claimed AND status = 'pendente';
    SELECT t.id, GET_LOCK(CONCAT(p_lock_prefix, t.id), 0) AS liveness_locked, JSON_OBJECT({task_json}) AS task
    FROM {table} AS t
    LEFT JOIN {table} AS first_attempt
           ON first_attempt.id = t.id_inicial AND t.payload IS NULL
    WHERE t.id = @nsjq_claimed AND t.status = 'processando';
    COMMIT AND CHAIN;
END//
DELIMITER ;
