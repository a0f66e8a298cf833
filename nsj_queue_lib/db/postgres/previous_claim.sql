-- The previous release's claim function (release 1, claim_next_<queue>),
-- which its workers keep calling during a rolling upgrade, becomes a call of
-- this release's: same arguments, result and version comment (those workers
-- check it at start), so they start and claim as before, but never take a
-- task of a processo with limits (they know nothing of limits), and skip a
-- task the unique index of running lock keys refuses instead of failing.
-- NULL handled subscribers and processos: every task, as that release claimed them;
-- a NULL worker: that release names none.
CREATE OR REPLACE FUNCTION {previous_claim_function}(
    done_id bigint, done_mensagem text, lock_queue_key integer, done_task_key integer, claim_limit integer
)
RETURNS TABLE (task {table}, first_payload text, liveness_locked boolean)
LANGUAGE sql
AS $$
    SELECT * FROM {claim_function}(done_id, done_mensagem, lock_queue_key, done_task_key,
                                   claim_limit, NULL, NULL, NULL)
$$;
COMMENT ON FUNCTION {previous_claim_function}(bigint, text, integer, integer, integer)
    IS '{previous_claim_version}';
