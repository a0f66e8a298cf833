-- Dependencies between tasks (docs/how-to/dependencies.md, nsj_queue_lib/workflow/).
-- One row per (parent, child): parent_id is the parent's first attempt's id
-- (its id_inicial), child_id the child's. The claim and settle functions look
-- a settled task up here by parent_id; parents() reads a child's by child_id.
-- settled: the parent's end has been counted in the child's pending_parents (or
-- it had ended when the child was inserted); an edge is counted only when this
-- flips, so once whatever the parent does next (a retry by hand).
-- slot: which of the child's counts (<queue>_waiting) the edge is counted in.
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
CREATE OR REPLACE FUNCTION {release_function}(parent_ids bigint[])
RETURNS integer
LANGUAGE plpgsql
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    zeroed bigint[];
    released integer;
BEGIN
    -- The slots are locked first, in (child, slot) order: two transactions
    -- settling parents that share children then queue on the first shared slot
    -- instead of deadlocking (the UPDATE below locks in its join's order, a hash
    -- aggregate's, which differs from one set of parents to another).
    PERFORM 1
    FROM {waiting_table} AS w
    WHERE (w.child_id, w.slot) IN (
        SELECT p.child_id, p.slot FROM {parents_table} AS p
        WHERE p.parent_id = ANY(parent_ids) AND NOT p.settled
    )
    ORDER BY w.child_id, w.slot
    FOR UPDATE;
    WITH flipped AS (
        UPDATE {parents_table} AS p
        SET settled = true
        WHERE p.parent_id = ANY(parent_ids) AND NOT p.settled
        RETURNING p.child_id, p.slot
    ), counted AS (
        SELECT flipped.child_id, flipped.slot, count(*)::integer AS n
        FROM flipped
        GROUP BY flipped.child_id, flipped.slot
    ), waited AS (
        UPDATE {waiting_table} AS w
        SET pending_parents = w.pending_parents - counted.n
        FROM counted
        WHERE w.child_id = counted.child_id AND w.slot = counted.slot
        RETURNING w.child_id, w.pending_parents
    )
    SELECT array_agg(DISTINCT waited.child_id) INTO zeroed
    FROM waited
    WHERE waited.pending_parents <= 0;
    IF zeroed IS NULL THEN
        RETURN 0;
    END IF;
    -- A child whose other slots are counted down by other transactions: its row is
    -- locked (in id order) before its slots are read, so that of two transactions
    -- taking its last two slots to 0, the second reads after the first's commit and
    -- releases it (each would read the other's slot unfinished otherwise). A child
    -- of one slot needs no such lock: its slot's lock is held.
    PERFORM 1
    FROM {table} AS t
    WHERE t.id = ANY(zeroed)
      AND (SELECT count(*) FROM {waiting_table} AS o WHERE o.child_id = t.id) > 1
    ORDER BY t.id
    FOR UPDATE OF t;
    UPDATE {table} AS t
    SET status = 'pendente'
    WHERE t.id = ANY(zeroed) AND t.status = 'aguardando'
      AND NOT EXISTS (
          SELECT 1 FROM {waiting_table} AS w WHERE w.child_id = t.id AND w.pending_parents > 0
      );
    GET DIAGNOSTICS released = ROW_COUNT;
    IF released > 0 THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN released;
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
