-- The worker's hot path in one call: a task that succeeded becomes 'sucesso'
-- and its liveness lock is released, then the next ready tasks are claimed
-- ('processando', their liveness locks taken by the calling session), all in
-- the caller's transaction. One statement instead of two saves a fifth of the
-- worker's CPU per task. The planner settings hold for this function's own
-- statements only: the claim must walk the partial claim index in order and
-- stop at the limit even when the table's statistics are stale.
CREATE OR REPLACE FUNCTION {claim_function}(
    done_id bigint, done_mensagem text, lock_queue_key integer, done_task_key integer, claim_limit integer,
    handled_subscribers varchar[]
)
RETURNS TABLE (task {table}, first_payload text, liveness_locked boolean)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
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
        -- lock_key: the unique index of running keys refuses a second running
        -- task of a key that this statement's snapshot saw free (another claim
        -- committed one since, docs/flow-control.md). The row is not this
        -- claim's to take: claim again, with a snapshot that sees the key busy.
        -- The liveness locks are output columns after the ORDER BY, evaluated
        -- after the sort (volatile), so after every row's UPDATE: a refused
        -- claim has taken no lock and returned no row.
        FOR attempt IN 1..3 LOOP
            BEGIN
                RETURN QUERY
                WITH next AS (
                    SELECT q.id
                    FROM {table} AS q
                    WHERE q.status = 'pendente' AND q.data_hora <= clock_timestamp()
                      -- lock_key: not while its key is busy (nsj_queue_lib/flow/lock_keys.py).
                      AND {lock_key_free}
                      -- Deliveries of subscribers the worker handles only (nsj_queue_lib/flow/deliveries.py).
                      AND {deliverable}
                      -- limited processos: only the limited claim takes them (flow/limits.py).
                      AND {limits_free}
                    ORDER BY q.prioridade DESC, q.data_hora, q.id
                    LIMIT claim_limit
                    FOR UPDATE SKIP LOCKED
                ), claimed AS (
                    UPDATE {table} AS t
                    SET status = 'processando'
                    FROM next
                    WHERE t.id = next.id
                    RETURNING t AS claimed_row, t.id AS claimed_id, t.id_inicial AS chain_id,
                              t.payload IS NULL AS needs_payload, t.prioridade AS claimed_prioridade,
                              t.data_hora AS claimed_data_hora
                )
                SELECT c.claimed_row, fa.payload,
                       pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4)
                FROM claimed AS c
                LEFT JOIN {table} AS fa ON fa.id = c.chain_id AND c.needs_payload
                ORDER BY c.claimed_prioridade DESC, c.claimed_data_hora, c.claimed_id;
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
