-- Dependencies between tasks (docs/how-to/dependencies.md, nsj_queue_lib/workflow/).
-- One row per (parent, child): parent_id is the parent's first attempt's id
-- (its id_inicial), child_id the child's. The claim and settle functions look
-- a settled task up here by parent_id; parents() reads a child's by child_id.
-- settled: the parent's failure has been counted in the child's pending_parents
-- (a failure's cascade flips it, so a retry by hand that succeeds is not counted
-- again), or the parent had ended when the child was inserted. A success is
-- counted without writing the edge (the release function): it is final.
-- slot: which of the child's counts (<queue>_waiting) the edge is counted in;
-- -1: the edge of a child's only unfinished parent (a fan-out's children), which
-- the release function reads and nothing else: the parent's success releases the
-- child by this edge alone, and the edge and its count stay as inserted (a
-- failure's cascade, workflow/dependencies.py, finds the child no longer
-- 'aguardando' after that and leaves it).
CREATE TABLE {if_not_exists}{parents_table} (
    parent_id bigint NOT NULL,
    child_id bigint NOT NULL,
    settled boolean NOT NULL DEFAULT false,
    slot smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX IF NOT EXISTS {idx_parents_child} ON {parents_table} (child_id);

-- A child in 'aguardando': how many of its parents have not finished yet, and
-- what a parent that ends dead-lettered or 'cancelada' does to it ('cancel':
-- the child is cancelled; 'run': it counts as finished). The count is split in
-- slots: a fan-in's parents, settled at once by several executors, lock their
-- own slots' rows until their commits. With one row, every settle waited for
-- the previous one's commit (the 10,000 parents of a fan-in drained at about
-- half the rate of independent tasks, a third inside a 1 -> 10,000 -> 1
-- workflow). A parent's edge counts in slot (parent_id / 8) % 32 (add_edge):
-- tasks are claimed in id order, a commit group's (up to QUEUE_BATCH_SIZE, 20)
-- consecutive ids, so a group takes a few neighbouring slots, which other
-- groups share only at their ends; slot parent_id % 32 put every group in
-- most slots. The child is released when its last slot reaches 0.
CREATE TABLE {if_not_exists}{waiting_table} (
    child_id bigint NOT NULL,
    slot smallint NOT NULL DEFAULT 0,
    pending_parents integer NOT NULL,
    on_parent_failure varchar(10) NOT NULL DEFAULT 'cancel',
    PRIMARY KEY (child_id, slot)
);

-- The children of settled parents (their first attempts' ids), released in the
-- settling transaction: the parents' unsettled edges flip, each child's slots go
-- down by their edges that flipped, and the children whose counts are all 0
-- become 'pendente' (the workers are told at commit). One statement per step,
-- whatever the number of children: no query per child.
-- Every statement walks indexes from the settled parents' edges (nested loops):
-- the first lock read the whole <queue>_waiting table at every settle, a seq
-- scan in a hash join or its primary key in a merge join (the planner guesses
-- 500 edges for any array of parents), 10,000 rows per settle of a commit group
-- of the fan-in's parents (6 ms of a backend's CPU each, 3 s in all).
-- Its planner settings are its own: called from the claim function, whose sort and
-- bitmap scans are off, its plans were made under those, and kept by the session
-- for every later call (a plan is not made again when the settings change): the
-- edges' count, kept from sorting, read every edge in child order, all of the
-- queue's edges at every settle (2.4 ms a settle of a 1 -> 10,000 -> 1 workflow's
-- children); every call's statements are planned once, generically, the same way.
CREATE OR REPLACE FUNCTION {release_function}(parent_ids bigint[])
RETURNS integer
LANGUAGE plpgsql
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_sort = on
SET enable_bitmapscan = on
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    zeroed bigint[] := '{}';
    released integer;
    sole_released integer;
    edges record;
    need integer;
    emptied boolean;
    free_slot smallint;
    free_count integer;
BEGIN
    -- A released child is due from now (or later, when it was scheduled so): a claim
    -- goes on from its last look-up's position while that is recent (claim_function.sql),
    -- and a child due at its insert's time, before that position, waited for the
    -- position's end (a 10,000 -> 1 fan-in started 2.2 s after its last parent).
    -- A child whose one unfinished parent this is (slot -1, add_edge): its row
    -- alone. Counting down as below cost a 1 -> 10,000 fan-out's release three
    -- times the UPDATE of its 10,000 rows (an edge and a count written per child
    -- besides). Only this parent's settle locks these rows, in its one statement.
    -- The edges by the parents' key first, then the rows by their primary key (status
    -- || '' is no condition the 'aguardando' index's predicate implies). As a join,
    -- planned generically, the statement read the rows first, walking that index
    -- (whose entries outlive their rows' release) or the primary key whole: a
    -- fan-out's 10,000 children were read again at each of their own settles.
    UPDATE {table} AS t
    SET status = 'pendente', data_hora = greatest(t.data_hora, clock_timestamp())
    WHERE t.id = ANY(ARRAY(
            SELECT p.child_id FROM {parents_table} AS p
            WHERE p.parent_id = ANY(parent_ids) AND p.slot = -1 AND NOT p.settled
        ))
      AND t.status || '' = 'aguardando';
    GET DIAGNOSTICS sole_released = ROW_COUNT;
    -- Each child's count goes down by its edges among these parents, taken from
    -- whichever of its slots are free: a slot is a share of the count, not of the
    -- parents, so a commit group never waits for another's slot while a free one
    -- holds enough (each waited for the other's commit on a shared slot: a
    -- 10,000 -> 1 fan-in's parents drained at half the rate of independent tasks
    -- with two workers). The edges are counted without being written: a task ends
    -- 'sucesso' once (its attempts' fence; retry_task takes only exhausted
    -- failures); an edge settled before (a failure's cascade counted it, or the
    -- parent had ended when the child was inserted) is not counted again.
    FOR edges IN
        SELECT p.child_id, count(*)::integer AS n
        FROM {parents_table} AS p
        WHERE p.parent_id = ANY(parent_ids) AND NOT p.settled AND p.slot >= 0
        GROUP BY p.child_id
        ORDER BY p.child_id
    LOOP
        -- One free slot that holds them all (nearly always, until the count's last
        -- parents): taken alone, with no subtransaction. A settlement of many children
        -- of several parents each would otherwise open one per child, and past 64 a
        -- transaction's subtransactions slow every other session's snapshots.
        SELECT w.slot, w.pending_parents INTO free_slot, free_count
        FROM {waiting_table} AS w
        WHERE w.child_id = edges.child_id AND w.pending_parents >= edges.n
        ORDER BY w.slot
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE {waiting_table} AS w
            SET pending_parents = w.pending_parents - edges.n
            WHERE w.child_id = edges.child_id AND w.slot = free_slot;
            IF free_count = edges.n THEN
                zeroed := array_append(zeroed, edges.child_id);
            END IF;
            CONTINUE;
        END IF;
        need := edges.n;
        emptied := false;
        BEGIN
            -- Free slots only, one at a time, in slot order: this transaction holds a
            -- slot it took some of and every slot it emptied, nothing it skipped.
            LOOP
                SELECT w.slot, w.pending_parents INTO free_slot, free_count
                FROM {waiting_table} AS w
                WHERE w.child_id = edges.child_id AND w.pending_parents > 0
                ORDER BY w.slot
                LIMIT 1
                FOR UPDATE SKIP LOCKED;
                EXIT WHEN NOT FOUND;
                UPDATE {waiting_table} AS w
                SET pending_parents = w.pending_parents - least(free_count, need)
                WHERE w.child_id = edges.child_id AND w.slot = free_slot;
                emptied := emptied OR free_count <= need;
                need := need - least(free_count, need);
                EXIT WHEN need = 0;
            END LOOP;
            IF need > 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'NQ002';
            END IF;
        EXCEPTION WHEN SQLSTATE 'NQ002' THEN
            -- Not enough free (the last parents, settled at once): the block's takes
            -- and locks are undone, and every slot is locked in slot order, waiting
            -- for the transactions that hold them, as every such wait is ordered (a
            -- transaction that skipped never waits for a slot; the gate below waits
            -- for none).
            PERFORM 1 FROM {waiting_table} AS w
            WHERE w.child_id = edges.child_id
            ORDER BY w.slot
            FOR UPDATE;
            WITH taken AS (
                UPDATE {waiting_table} AS w
                SET pending_parents = w.pending_parents - least(w.pending_parents, edges.n - r.before)
                FROM (
                    SELECT o.slot, coalesce(sum(o.pending_parents) OVER (
                        ORDER BY o.slot ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
                    ), 0) AS before
                    FROM {waiting_table} AS o
                    WHERE o.child_id = edges.child_id AND o.pending_parents > 0
                ) AS r
                WHERE w.child_id = edges.child_id AND w.slot = r.slot AND r.before < edges.n
                RETURNING w.pending_parents
            )
            SELECT coalesce(bool_or(taken.pending_parents = 0), false) INTO emptied FROM taken;
        END;
        IF emptied THEN
            zeroed := array_append(zeroed, edges.child_id);
        END IF;
    END LOOP;
    IF cardinality(zeroed) = 0 THEN
        IF sole_released > 0 THEN
            PERFORM pg_notify('{channel}', '');
        END IF;
        RETURN sole_released;
    END IF;
    -- A child whose other slots are counted down by other transactions: its row is
    -- locked (in id order) before its slots are read, so that of two transactions
    -- each emptying one of its last two slots, the second reads after the first's
    -- commit and releases it (each would read the other's slot unfinished
    -- otherwise). Every transaction that empties a slot comes here, and an empty
    -- slot stays empty, so the last of them to take the lock sees every slot
    -- empty. A child of one slot needs no such lock: its slot's lock is held.
    PERFORM 1
    FROM {table} AS t
    WHERE t.id = ANY(zeroed)
      AND (SELECT count(*) FROM {waiting_table} AS o WHERE o.child_id = t.id) > 1
    ORDER BY t.id
    FOR UPDATE OF t;
    UPDATE {table} AS t
    SET status = 'pendente', data_hora = greatest(t.data_hora, clock_timestamp())
    WHERE t.id = ANY(zeroed) AND t.status || '' = 'aguardando'
      AND NOT EXISTS (
          SELECT 1 FROM {waiting_table} AS w WHERE w.child_id = t.id AND w.pending_parents > 0
      );
    GET DIAGNOSTICS released = ROW_COUNT;
    IF released + sole_released > 0 THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN released + sole_released;
END;
$$;

-- Durable steps and waits (docs/how-to/durable-steps.md, nsj_queue_lib/workflow/steps.py):
-- one checkpoint per (task, name), task_id being the task's first attempt's id
-- (its id_inicial), so every attempt of the task finds it. result is the step's
-- JSON result, committed with the step's writes; attempt_id the attempt that
-- wrote it. A durable wait's checkpoint names the event it waits for in
-- waiting_for until the event arrives (send_event looks there).
CREATE TABLE {if_not_exists}{steps_table} (
    task_id bigint NOT NULL,
    name varchar(200) NOT NULL,
    result text NOT NULL,
    attempt_id bigint NOT NULL,
    waiting_for varchar(200),
    created_at timestamp with time zone NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (task_id, name)
);

-- The events sent to tasks (QueueClient.send_event), kept whether or not the
-- task waits for them yet; task_id is the task's first attempt's id. A task's
-- n-th wait_event of a name gets its n-th event of that name (by id).
CREATE TABLE {if_not_exists}{events_table} (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL,
    name varchar(200) NOT NULL,
    payload text,
    created_at timestamp with time zone NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {idx_events_task} ON {events_table} (task_id, name, id);
