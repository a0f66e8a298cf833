-- What an executor sends after a task, stored: the server parses it once per
-- session instead of once per task. With a finished task (p_task_id), its
-- 'sucesso' and the release of its liveness lock, then the claim of the next
-- task with the same order, locking and liveness lock as the plain-SQL claim
-- in queries.sql, which workers use when this procedure is missing or from
-- another version (the COMMENT). The worker sends the CALL, a read of the
-- session variables it fills and COMMIT AND CHAIN in one round trip.
-- @nsjq_completed tells a failed call's caller whether the completion ran.
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
    SET @nsjq_completed = 0, @nsjq_claimed = NULL, @nsjq_claimed_locked = NULL, @nsjq_claimed_task = NULL;
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
    SELECT GET_LOCK(CONCAT(p_lock_prefix, t.id), 0), JSON_OBJECT({task_json})
    INTO @nsjq_claimed_locked, @nsjq_claimed_task
    FROM {table} AS t
    LEFT JOIN {table} AS first_attempt
           ON first_attempt.id = t.id_inicial AND t.payload IS NULL
    WHERE t.id = @nsjq_claimed AND t.status = 'processando';
END//
DELIMITER ;
