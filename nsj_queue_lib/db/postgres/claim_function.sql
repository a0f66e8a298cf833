-- The worker's hot path in one call: a task that succeeded becomes 'sucesso'
-- and its liveness lock is released, then the next ready tasks are claimed
-- ('processando', their liveness locks taken by the calling session), all in
-- the caller's transaction. One statement instead of two saves a fifth of the
-- worker's CPU per task. The planner settings hold for this function's own
-- statements only: the claim must walk the partial claim index in order and
-- stop at the limit even when the table's statistics are stale, and read the
-- running lock keys from their own index, in its order (no sort: with
-- statistics, the planner read them from the processo index, which holds every
-- ready row too; db/postgres/claim_sets.py).
CREATE OR REPLACE FUNCTION {claim_function}(
    done_id bigint, done_mensagem text, lock_queue_key integer, done_task_key integer, claim_limit integer,
    handled_subscribers varchar[]
)
RETURNS TABLE (task {table}, first_payload text, liveness_locked boolean)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    window_size integer := greatest(claim_limit * 8, 128);
    top_prioridade {table}.prioridade%TYPE;
    edge_prioridade {table}.prioridade%TYPE;
    edge_data_hora {table}.data_hora%TYPE;
    edge_id {table}.id%TYPE;
    claimed bigint;
BEGIN
    IF done_id IS NOT NULL THEN
        UPDATE {table} AS d
        SET status = 'sucesso', mensagem = done_mensagem
        WHERE d.id = done_id AND d.status = 'processando';
        -- Advisory unlocks are not transactional: the lock goes even if the
        -- row was no longer 'processando'.
        PERFORM pg_advisory_unlock(lock_queue_key, done_task_key);
    END IF;
    IF claim_limit > 0 THEN
        -- claim_query.sql, at most three times: lock_key's unique index of
        -- running keys refuses a row another claim took the key of since this
        -- statement's snapshot; claimed again, the snapshot sees the key busy.
        FOR attempt IN 1..3 LOOP
            BEGIN
                -- First among the first ready rows only (the window: eight per task asked
                -- for, its edge read from the claim index without a probe). A claim that
                -- finds fewer than claim_limit walks every ready row to the end, two
                -- probes each for a keyed row: with most keys busy (more executor slots
                -- than keys) nearly every claim did (issue 19). The window's claimable
                -- rows are the ones the whole walk would claim first, in the same order;
                -- rows beyond it wait for the next claim. Every ready row is walked when
                -- the window gives nothing: a claim still says "nothing" only when
                -- nothing is claimable. Only a window of one prioridade (the usual
                -- backlog) is walked apart, where the index scan can stop at its edge.
                SELECT w.prioridade, w.data_hora, w.id
                INTO edge_prioridade, edge_data_hora, edge_id
                FROM {table} AS w
                WHERE w.status = 'pendente' AND w.data_hora <= clock_timestamp()
                ORDER BY w.prioridade DESC, w.data_hora, w.id
                OFFSET window_size - 1 LIMIT 1;
                IF FOUND THEN
                    SELECT w.prioridade INTO top_prioridade
                    FROM {table} AS w
                    WHERE w.status = 'pendente' AND w.data_hora <= clock_timestamp()
                    ORDER BY w.prioridade DESC, w.data_hora, w.id
                    LIMIT 1;
                END IF;
                claimed := 0;
                IF top_prioridade = edge_prioridade THEN
                    RETURN QUERY {claim_in_window};
                    GET DIAGNOSTICS claimed = ROW_COUNT;
                END IF;
                IF claimed = 0 THEN
                    RETURN QUERY {claim_anywhere};
                END IF;
                RETURN;
            EXCEPTION WHEN unique_violation THEN
                NULL;
            END;
        END LOOP;
    END IF;
END;
$$;
-- Workers check this at start: a function of another version stops them
-- with a message naming db_gen --upgrade.
COMMENT ON FUNCTION {claim_function}(bigint, text, integer, integer, integer, varchar[])
    IS '{claim_function_version}';
