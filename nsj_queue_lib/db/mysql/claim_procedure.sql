-- The executor's claim of one task, stored: the server parses it once per
-- session instead of once per task (the worker calls it in the finished
-- task's batch, after the completion and before COMMIT AND CHAIN). Same
-- order, locking and liveness lock as the plain-SQL claim in queries.sql,
-- which workers use when this procedure is missing or from another version
-- (the COMMENT). The claimed row goes to session variables, read by the
-- batch's next statement, so the CALL returns no result set.
DELIMITER //
CREATE PROCEDURE {claim_function}(IN p_lock_prefix VARCHAR(64))
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT '{claim_procedure_version}'
BEGIN
    -- No ready task: SELECT ... INTO assigns nothing, and that is no error here.
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    SET @nsjq_claimed = NULL, @nsjq_claimed_locked = NULL, @nsjq_claimed_task = NULL;
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
