-- Dependencies between tasks (docs/how-to/dependencies.md, nsj_queue_lib/workflow/).
-- One row per (parent, child): parent_id is the parent's first attempt's id
-- (its id_inicial), child_id the child's. The claim and settle functions look
-- a settled task up here by parent_id; parents() reads a child's by child_id.
-- settled: the parent's end has been counted in the child's pending_parents (or
-- it had ended when the child was inserted); an edge is counted only when this
-- flips, so once whatever the parent does next (a retry by hand).
CREATE TABLE {if_not_exists}{parents_table} (
    parent_id bigint NOT NULL,
    child_id bigint NOT NULL,
    settled boolean NOT NULL DEFAULT false,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX IF NOT EXISTS {idx_parents_child} ON {parents_table} (child_id);

-- A child in 'aguardando': how many of its parents have not finished yet, and
-- what a parent that ends dead-lettered or 'cancelada' does to it ('cancel':
-- the child is cancelled; 'run': it counts as finished).
CREATE TABLE {if_not_exists}{waiting_table} (
    child_id bigint NOT NULL PRIMARY KEY,
    pending_parents integer NOT NULL,
    on_parent_failure varchar(10) NOT NULL DEFAULT 'cancel'
);

-- The children of settled parents (their first attempts' ids), released in the
-- settling transaction: the parents' unsettled edges flip, each child's count
-- goes down by its edges that flipped, and the children whose count reaches 0
-- become 'pendente' (the workers are told at commit). One statement per step,
-- whatever the number of children: no query per child.
CREATE OR REPLACE FUNCTION {release_function}(parent_ids bigint[])
RETURNS integer
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    released integer;
BEGIN
    -- The children's counts are locked first, in child id order: two transactions
    -- settling parents that share children then queue on the first shared one
    -- instead of deadlocking (the UPDATE below locks in its join's order, a hash
    -- aggregate's, which differs from one set of parents to another).
    PERFORM 1
    FROM {waiting_table} AS w
    WHERE w.child_id IN (
        SELECT p.child_id FROM {parents_table} AS p
        WHERE p.parent_id = ANY(parent_ids) AND NOT p.settled
    )
    ORDER BY w.child_id
    FOR UPDATE;
    WITH flipped AS (
        UPDATE {parents_table} AS p
        SET settled = true
        WHERE p.parent_id = ANY(parent_ids) AND NOT p.settled
        RETURNING p.child_id
    ), counted AS (
        SELECT flipped.child_id, count(*)::integer AS n
        FROM flipped
        GROUP BY flipped.child_id
    ), waited AS (
        UPDATE {waiting_table} AS w
        SET pending_parents = w.pending_parents - counted.n
        FROM counted
        WHERE w.child_id = counted.child_id
        RETURNING w.child_id, w.pending_parents
    )
    UPDATE {table} AS t
    SET status = 'pendente'
    FROM waited
    WHERE t.id = waited.child_id AND waited.pending_parents <= 0 AND t.status = 'aguardando';
    GET DIAGNOSTICS released = ROW_COUNT;
    IF released > 0 THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN released;
END;
$$;
