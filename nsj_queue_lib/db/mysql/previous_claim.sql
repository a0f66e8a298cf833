-- The previous release's claim procedure (release 1, claim_next_<queue>),
-- which its workers keep calling during a rolling upgrade, becomes a call of
-- this release's: same arguments, result and version comment (those workers
-- check it at start), so they start and claim as before, but never take a
-- task of a processo with limits (they know nothing of limits), and skip a
-- task the unique index of running lock keys refuses instead of failing.
-- NULL handled subscribers and processos: every task, as that release claimed them
-- (and a NULL worker: that release names none);
-- one task per CALL, as that release claimed.
DROP PROCEDURE IF EXISTS {previous_claim_function};
DELIMITER //
CREATE PROCEDURE {previous_claim_function}(
    IN p_task_id BIGINT,
    IN p_mensagem VARCHAR(500) CHARACTER SET utf8mb4,
    IN p_lock_prefix VARCHAR(64)
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT '{previous_claim_version}'
BEGIN
    SET @nsjq_claim_limit = NULL;
    CALL {claim_function}(p_task_id, p_mensagem, p_lock_prefix, NULL, NULL, NULL);
END//
DELIMITER ;
