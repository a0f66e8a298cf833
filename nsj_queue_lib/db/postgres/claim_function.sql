-- The worker's hot path in one call: a task that succeeded becomes 'sucesso'
-- and its liveness lock is released, then the next ready tasks are claimed
-- ('processando', their liveness locks taken by the calling session), all in
-- the caller's transaction. One statement instead of two saves a fifth of the
-- worker's CPU per task. The planner settings hold for this function's own
-- statements only. Each is planned once per session (force_generic_plan): with
-- custom plans, the planner found every call's plan cheaper than the generic one
-- (the claim's LIMIT is a parameter) and planned each call anew, which cost as
-- much as the rest of the call (a partitioned table's plan opens every
-- partition too). The claim must walk the partial claim index in order and
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
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    window_size integer := greatest(claim_limit * 8, 128);
    top_prioridade {table}.prioridade%TYPE;
    top_data_hora {table}.data_hora%TYPE;
    top_id {table}.id%TYPE;
    remembered text[];
    pos_prioridade {table}.prioridade%TYPE;
    pos_data_hora {table}.data_hora%TYPE;
    pos_id {table}.id%TYPE;
    pos_empty boolean := false;
    pos_fresh boolean := false;
    pos_edge_data_hora {table}.data_hora%TYPE := 'infinity';
    pos_edge_id {table}.id%TYPE := {no_edge_id};
    now_us bigint;
    due_until timestamptz;
    looked_at timestamptz;
    edge_prioridade {table}.prioridade%TYPE;
    edge_data_hora {table}.data_hora%TYPE;
    edge_id {table}.id%TYPE;
    claimed bigint;
    more bigint;
    claimed_rec record;
    settled bigint;
    done_first bigint;
    -- A held claim (claim_query.sql), asked for by the transaction (SET LOCAL).
    hold boolean := coalesce(current_setting('nsjq.hold', true), '') = 'on';
    -- When and by whom this transaction's held claim claimed (read once: per row, the
    -- settings' reads cost a sixth of a settle's UPDATE).
    held_at timestamptz := nullif(current_setting('nsjq.held_at', true), '')::timestamptz;
    held_by varchar := nullif(current_setting('nsjq.held_by', true), '');
BEGIN
    IF done_id IS NOT NULL THEN
        UPDATE {table} AS d
        SET status = 'sucesso', mensagem = done_mensagem, finished_at = clock_timestamp(),
            started_at = coalesce(d.started_at, held_at),
            worker = coalesce(d.worker, held_by){finished_day_d}
        -- status || '': by the primary key only (see the settle function below). A held
        -- row is 'pendente', locked by this transaction since its claim.
        WHERE {hot_d}d.id = done_id
          AND (d.status || '' = 'processando' OR (hold AND d.status || '' = 'pendente'))
        RETURNING coalesce(d.id_inicial, d.id) INTO done_first;
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
        -- Its children waiting for it (workflow/dependencies.py), released in this
        -- transaction. A child inserted meanwhile held the row's lock until its
        -- commit, which this statement's snapshot (taken after the UPDATE) sees.
        IF EXISTS (SELECT 1 FROM {parents_table} AS p WHERE p.parent_id = done_first) THEN
            PERFORM {release_function}(ARRAY[done_first]);
        END IF;
    END IF;
    IF claim_limit > 0 THEN
        IF hold THEN
            -- When and by whom the held rows were claimed: their outcome's write says it
            -- (started_at, worker), as the claim's own write does for the others.
            PERFORM set_config('nsjq.held_at', clock_timestamp()::text, true),
                    set_config('nsjq.held_by', worker_name, true);
        END IF;
        -- Where ready tasks began at this session's last look-up, while it is recent:
        -- '<queue key>,<fresh until>,<prioridade>,<data_hora>,<id>,<ready|empty>,<until>'
        -- (instants in microseconds since the epoch: exact, and no DateStyle or time
        -- zone a handler sets changes them; "empty": the look-up found nothing ready,
        -- see below). A custom setting of the session: it survives the commit, and goes
        -- with a rollback, as the claim does.
        remembered := string_to_array(current_setting('nsjq.claim_position', true), ',');
        now_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
        IF remembered[1] = lock_queue_key::text
           AND coalesce(remembered[7], remembered[2])::bigint > now_us THEN
            pos_prioridade := remembered[3]::integer;
            pos_data_hora := to_timestamp(0) + remembered[4]::bigint * interval '1 microsecond';
            pos_id := remembered[5]::bigint;
            pos_empty := remembered[6] IS NOT DISTINCT FROM 'empty';
            pos_fresh := remembered[2]::bigint > now_us;
            -- The last row of the look-up's window (none: fewer ready rows than a window).
            IF coalesce(remembered[9], '') <> '' THEN
                pos_edge_data_hora := to_timestamp(0) + remembered[8]::bigint * interval '1 microsecond';
                pos_edge_id := remembered[9]::bigint;
            END IF;
        END IF;
        -- claim_query.sql, at most three times: lock_key's unique index of
        -- running keys refuses a row another claim took the key of since this
        -- statement's snapshot; claimed again, the snapshot sees the key busy.
        -- Each claimed row is returned with its retry's first payload (on the
        -- partitioned layout read by a statement of its own, for retries only:
        -- db/postgres/dialect.py says why); claimed counts them.
        -- On a partitioned table (db/postgres/layout.py) a row this statement's
        -- snapshot saw ready may have been claimed and settled since, which moved
        -- it to its day's partition: its lock is refused with a serialization
        -- failure instead of being skipped, before any row was updated or any
        -- lock taken; claimed again, the snapshot no longer sees it.
        FOR attempt IN 1..3 LOOP
            BEGIN
                claimed := 0;
                -- From the position on (the claim index from there, in claim order):
                -- between it and the first ready task lie only tasks claimed since the
                -- look-up. Claims that walked from the index's start walked every
                -- task claimed since the oldest snapshot still held elsewhere (a
                -- report's REPEATABLE READ, a replica's feedback): their entries stay
                -- until then, and the walk grew with every task (docs/internals/
                -- storage.md, "A held snapshot"). A task that becomes ready ahead of
                -- the position meanwhile (a higher prioridade, a retry, one given back)
                -- waits for the next look-up: claim order may lag by the position's
                -- life, never more. Nothing after it: a look-up at once (unless the
                -- position is an empty look-up's, below). A position has two lives:
                -- while fresh (20 times as long as its look-up took) "nothing after it"
                -- is followed by a look-up; after that, until its end (100 times, 5 s
                -- at most), a claim still takes what is after it first, and looks up
                -- only when nothing is: under a held snapshot the look-ups, which walk
                -- every entry it keeps, then come when the queue has drained, not in
                -- front of the tasks that just arrived.
                -- Where busy keys filled the look-up's window (below), window by window:
                -- from the position to that window's last row, then, when nothing there
                -- is claimable, the next window after it (the position's window from
                -- then on). A walk from the position to the end, looking for a group's
                -- worth, probed the key index for every keyed row it passed: the whole
                -- backlog of a busy process's calls at every claim (14 ms a claim at
                -- 3,000 queued calls, benchmarks/bench_key_backlog.py); a filter that let
                -- keyed rows through only up to the window's last row spared the probes
                -- but walked the backlog to its end once the window was claimed (calls to
                -- 3,000 processes drained at 0.75 of the walk's speed). Windows keep the
                -- claim order. No window kept, or nothing claimable in both: every row
                -- from the position, so that a claim says "nothing" only when nothing is
                -- claimable and a look-up is no more frequent than it was.
                IF pos_id IS NOT NULL THEN
                    IF pos_edge_id <> {no_edge_id} THEN
                        {claim_position_window}
                        IF claimed = 0 THEN
                            SELECT w.data_hora, w.id INTO edge_data_hora, edge_id
                            FROM {table} AS w
                            WHERE {hot_w}w.status = 'pendente' AND w.data_hora <= clock_timestamp()
                              AND w.prioridade = pos_prioridade
                              AND (w.data_hora, w.id) > (pos_edge_data_hora, pos_edge_id)
                            ORDER BY w.prioridade DESC, w.data_hora, w.id
                            OFFSET window_size - 1 LIMIT 1;
                            IF edge_id IS NULL THEN
                                edge_data_hora := 'infinity';
                                edge_id := {no_edge_id};
                            END IF;
                            {claim_next_window}
                            IF claimed > 0 THEN
                                -- The next window is the position's from now on.
                                PERFORM set_config('nsjq.claim_position', concat_ws(',',
                                    remembered[1], remembered[2], remembered[3], remembered[4],
                                    remembered[5], remembered[6], remembered[7],
                                    CASE WHEN edge_id <> {no_edge_id}
                                         THEN (extract(epoch FROM edge_data_hora) * 1000000)::bigint
                                    END,
                                    CASE WHEN edge_id <> {no_edge_id} THEN edge_id END),
                                    false);
                            END IF;
                        END IF;
                    END IF;
                    IF claimed = 0 THEN
                        {claim_after_position}
                    END IF;
                    IF claimed > 0 THEN
                        RETURN;
                    END IF;
                    -- After a look-up that found nothing ready, for its position's life:
                    -- what became ready since is after it (its prioridade: just walked)
                    -- or among the due index's entries since a second before the look-up
                    -- (any prioridade). Neither: nothing, without a look-up. Under a held
                    -- snapshot every look-up of an idle queue walked the entries of all
                    -- the tasks claimed since the snapshot; now a session does one per
                    -- position life. Missed: a row that became ready since with an older
                    -- data_hora (a transaction open for over a second, a task given back
                    -- or released, a past data_hora given at enqueue), found at the next
                    -- claim after the position's life, which the dispatcher makes sure of
                    -- (claim_recheck_seconds, runtime/dispatcher.py).
                    IF pos_empty AND pos_fresh THEN
                        due_until := clock_timestamp();
                        -- The due index's own predicate, so that no other partial
                        -- index (the processo index holds every running entry) fits.
                        PERFORM 1 FROM {table} AS w
                        WHERE {hot_w}w.status IN ('pendente', 'agendada')
                          AND w.data_hora >= pos_data_hora AND w.data_hora <= due_until
                        LIMIT 1;
                        IF NOT FOUND THEN
                            RETURN;
                        END IF;
                    END IF;
                END IF;
                looked_at := clock_timestamp();
                -- The look-up walks the claim index from its start once: to the first
                -- ready row. Under a held snapshot that walk passes the entries of every
                -- task claimed since the snapshot, so it is the only one: nothing ready
                -- ends the look-up, and the window and the claims start from that row
                -- (the index scan's lower bound). A row that became ready ahead of it
                -- since waits for the next look-up, as one ahead of a position does.
                SELECT w.prioridade, w.data_hora, w.id INTO top_prioridade, top_data_hora, top_id
                FROM {table} AS w
                WHERE {hot_w}w.status = 'pendente' AND w.data_hora <= clock_timestamp()
                ORDER BY w.prioridade DESC, w.data_hora, w.id
                LIMIT 1;
                IF top_id IS NULL THEN
                    -- The empty look-up's position (read above): a second before it, in
                    -- the prioridade of the session's last position (none: no position).
                    -- Its life counts from the look-up's start, so the dispatcher's
                    -- recheck comes after it ends.
                    IF remembered[1] = lock_queue_key::text AND remembered[3] IS NOT NULL THEN
                        PERFORM set_config('nsjq.claim_position', concat_ws(',',
                            lock_queue_key,
                            (extract(epoch FROM looked_at) * 1000000
                             + 1000000 * least(2.0, greatest(0.02,
                                 20 * extract(epoch FROM clock_timestamp() - looked_at))))::bigint,
                            remembered[3],
                            (extract(epoch FROM looked_at - interval '1 second') * 1000000)::bigint,
                            0,
                            'empty',
                            (extract(epoch FROM looked_at) * 1000000
                             + 1000000 * least(5.0, greatest(0.02,
                                 100 * extract(epoch FROM clock_timestamp() - looked_at))))::bigint),
                            false);
                    END IF;
                    RETURN;
                END IF;
                pos_prioridade := top_prioridade;
                pos_data_hora := top_data_hora;
                pos_id := top_id;
                -- First among the first ready rows only (the window: eight per task asked
                -- for, of the first row's prioridade, its edge read from the claim index
                -- without a probe). A claim that finds fewer than claim_limit walks every
                -- ready row to the end, two probes each for a keyed row: with most keys
                -- busy (more executor slots than keys) nearly every claim did (issue 19).
                -- The window's claimable rows are the ones the whole walk would claim
                -- first, in the same order; rows beyond it wait for the next claim. Fewer
                -- ready rows of that prioridade than a window, or nothing claimable in
                -- it: every ready row from the first on, that prioridade's then the lower
                -- ones' (the same claim order as one walk), so a claim still says
                -- "nothing" only when nothing is claimable.
                SELECT w.prioridade, w.data_hora, w.id
                INTO edge_prioridade, edge_data_hora, edge_id
                FROM {table} AS w
                WHERE {hot_w}w.status = 'pendente' AND w.data_hora <= clock_timestamp()
                  AND w.prioridade = top_prioridade
                  AND (w.data_hora, w.id) >= (top_data_hora, top_id)
                ORDER BY w.prioridade DESC, w.data_hora, w.id
                OFFSET window_size - 1 LIMIT 1;
                IF edge_id IS NOT NULL THEN
                    {claim_in_window}
                    -- The position keeps the window's last row (its claims go window by
                    -- window, below) only when the window gave fewer than asked while
                    -- keyed tasks run: busy keys' queued tasks fill it. Otherwise its
                    -- claims walk on from it, one statement each: windows cost a plain
                    -- drain a statement to find each next window's last row, and a claim
                    -- more whenever a window runs out (with 8 executors other sessions
                    -- empty a window first: 16% more database CPU per task, paired).
                    IF claimed >= claim_limit OR NOT EXISTS (
                        SELECT 1 FROM {table} AS w
                        WHERE {hot_w}w.lock_key IS NOT NULL AND w.status = 'processando'
                    ) THEN
                        edge_data_hora := NULL;
                        edge_id := NULL;
                    END IF;
                END IF;
                IF claimed = 0 THEN
                    -- Every ready row from the first on.
                    {claim_after_position}
                    IF claimed < claim_limit THEN
                        {claim_below}
                    END IF;
                END IF;
                -- The position is fresh 20 times as long as this look-up took, 20 ms at
                -- least and 2 s at most: look-ups never take more than a twentieth of the
                -- claims' time, however many entries a held snapshot keeps. It ends at
                -- 100 times, 5 s at most.
                IF top_id IS NOT NULL THEN
                    PERFORM set_config('nsjq.claim_position', concat_ws(',',
                        lock_queue_key,
                        (extract(epoch FROM clock_timestamp()) * 1000000
                         + 1000000 * least(2.0, greatest(0.02,
                             20 * extract(epoch FROM clock_timestamp() - looked_at))))::bigint,
                        top_prioridade,
                        (extract(epoch FROM top_data_hora) * 1000000)::bigint,
                        top_id,
                        'ready',
                        (extract(epoch FROM clock_timestamp()) * 1000000
                         + 1000000 * least(5.0, greatest(0.02,
                             100 * extract(epoch FROM clock_timestamp() - looked_at))))::bigint,
                        -- The window's last row (none: fewer ready rows than a window, or
                        -- a window that gave what was asked, above).
                        (extract(epoch FROM edge_data_hora) * 1000000)::bigint,
                        edge_id),
                        false);
                END IF;
                RETURN;
            EXCEPTION WHEN unique_violation OR serialization_failure THEN
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
-- No sequential scans: each session plans these statements once, often while the
-- queue's side tables are still empty, and a plan made then read every edge of
-- <queue>_parents at every settle afterwards (a 1 -> 10,000 fan-out's children
-- drained at half the rate of independent tasks, each group's look for children
-- reading the 10,000 edges).
CREATE OR REPLACE FUNCTION {settle_function}(
    done_ids bigint[], done_mensagens text[], lock_queue_key integer
)
RETURNS bigint
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    settled bigint;
    fenced bigint[];
    firsts bigint[];
    hold boolean := coalesce(current_setting('nsjq.hold', true), '') = 'on';
    held_at timestamptz := nullif(current_setting('nsjq.held_at', true), '')::timestamptz;
    held_by varchar := nullif(current_setting('nsjq.held_by', true), '');
BEGIN
    -- Each row's mensagem by its id's position (a join with the unnested arrays
    -- became a nested loop over them once planned generically with a backlog).
    -- The rows by their primary key only: status || '' is no condition a partial
    -- index's predicate implies. Planned generically on a hot table of few live rows,
    -- the plain status = 'processando' read every entry of the processo index's
    -- running rows instead, dead ones included: under a held snapshot, every task
    -- run since it began (189,000 entries a settle, 31 million in 5 s, at minute 7
    -- of benchmarks/bench_held_horizon.py).
    WITH done AS (
        UPDATE {table} AS t
        SET status = 'sucesso', mensagem = done_mensagens[array_position(done_ids, t.id)],
            finished_at = clock_timestamp(),
            started_at = coalesce(t.started_at, held_at),
            worker = coalesce(t.worker, held_by){finished_day_t}
        WHERE {hot_t}t.id = ANY(done_ids)
          AND (t.status || '' = 'processando' OR (hold AND t.status || '' = 'pendente'))
        RETURNING coalesce(t.id_inicial, t.id) AS first_id
    )
    SELECT count(*), array_agg(done.first_id) INTO settled, firsts FROM done;
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
    -- Their children waiting for them, released in this transaction (as in the
    -- claim function).
    IF EXISTS (SELECT 1 FROM {parents_table} AS p WHERE p.parent_id = ANY(firsts)) THEN
        PERFORM {release_function}(firsts);
    END IF;
    RETURN settled;
END;
$$;
