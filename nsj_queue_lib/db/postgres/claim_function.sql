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
    handled_subscribers varchar[], handled_processos varchar[], worker_name varchar
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
    settled bigint;
BEGIN
    IF done_id IS NOT NULL THEN
        UPDATE {table} AS d
        SET status = 'sucesso', mensagem = done_mensagem, finished_at = clock_timestamp()
        WHERE d.id = done_id AND d.status = 'processando';
        GET DIAGNOSTICS settled = ROW_COUNT;
        -- After the UPDATE, whose row lock keeps the retry service away until the
        -- commit. Advisory unlocks are not transactional: the lock goes even when
        -- the fence below rolls the transaction back.
        PERFORM pg_advisory_unlock(lock_queue_key, done_task_key);
        -- The fence: an attempt that no longer owns its row (another worker rescued
        -- it, and its new attempt runs the handler again) must not commit its
        -- handler's writes. The error rolls the whole transaction back.
        IF settled = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'NQ001',
                MESSAGE = format('nsjq fenced: task %s is no longer ''processando''', done_id);
        END IF;
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
COMMENT ON FUNCTION {claim_function}(bigint, text, integer, integer, integer, varchar[], varchar[], varchar)
    IS '{claim_function_version}';

-- A commit group's successes (db/postgres/group_wire.py): each task 'sucesso'
-- with its mensagem, then the liveness locks released, in the caller's
-- transaction. The locks go only after the UPDATE holds every row: released
-- first, a task would be 'processando' without its lock (committed) and not
-- locked by this transaction, which the retry service reads as abandoned
-- (issue 36). The fence: when a task is no longer 'processando' (rescued by
-- another worker), the error rolls the group's transaction back, its
-- handlers' writes with it; the group gives its other tasks back.
CREATE OR REPLACE FUNCTION {settle_function}(
    done_ids bigint[], done_mensagens text[], lock_queue_key integer
)
RETURNS bigint
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    settled bigint;
    fenced bigint[];
BEGIN
    -- Each row's mensagem by its id's position (a join with the unnested arrays
    -- became a nested loop over them once planned generically with a backlog).
    UPDATE {table} AS t
    SET status = 'sucesso', mensagem = done_mensagens[array_position(done_ids, t.id)],
        finished_at = clock_timestamp()
    WHERE t.id = ANY(done_ids) AND t.status = 'processando';
    GET DIAGNOSTICS settled = ROW_COUNT;
    PERFORM pg_advisory_unlock(lock_queue_key, (done.id % 2147483648)::int4)
    FROM unnest(done_ids) AS done(id);
    IF settled < cardinality(done_ids) THEN
        SELECT array_agg(done.id ORDER BY done.id) INTO fenced
        FROM unnest(done_ids) AS done(id)
        WHERE NOT EXISTS (
            SELECT 1 FROM {table} AS t WHERE t.id = done.id AND t.status = 'sucesso'
        );
        RAISE EXCEPTION USING ERRCODE = 'NQ001',
            MESSAGE = format('nsjq fenced: tasks %s are no longer ''processando''', fenced);
    END IF;
    RETURN settled;
END;
$$;
