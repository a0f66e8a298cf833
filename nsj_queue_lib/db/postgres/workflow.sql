-- Named queries of dependencies between tasks (nsj_queue_lib/workflow/).
-- {queue_table}, {parents_table}, {waiting_table} and {release_function} are
-- validated identifiers; every value is a bound parameter.

-- name: parent_first
-- The first attempt's id of the task an attempt's id belongs to (a retry is the
-- same parent). id_inicial never changes once written.
SELECT coalesce(id_inicial, id) FROM {queue_table} WHERE id = %(id)s

-- name: parent_latest
-- The task's latest attempt (NULL: the first attempt is the only one). Each
-- statement sees the latest commit under READ COMMITTED.
SELECT max(id) FROM {queue_table} WHERE id_inicial = %(first)s

-- name: parent_state
-- That attempt, locked until the caller's commit: a worker settling it waits for
-- the child's edges to commit (and then sees them), or the child sees it settled.
SELECT t.id, coalesce(t.id_inicial, t.id), t.status, t.reenfileirado, t.estouro_tentativas, t.dead
FROM {queue_table} AS t
WHERE t.id = %(id)s
FOR SHARE

-- name: add_edge
-- settled: the parent had already finished when the child was inserted (it is
-- not counted in the child's pending_parents, and never counted again). slot:
-- the child's count it is counted in, eight neighbouring ids a slot
-- (workflow_tables.sql says why); -1 (sole): the child's one unfinished parent,
-- whose success releases it with no count to go down (the release function).
INSERT INTO {parents_table} (parent_id, child_id, settled, slot)
VALUES (
    %(parent)s, %(child)s, %(settled)s,
    CASE WHEN %(sole)s THEN -1 ELSE mod(%(parent)s::bigint / 8, 32) END
)

-- name: add_waiting
-- The child's counts, one per slot of its unsettled edges (inserted before).
INSERT INTO {waiting_table} (child_id, slot, pending_parents, on_parent_failure)
SELECT p.child_id, p.slot, count(*), %(on_parent_failure)s
FROM {parents_table} AS p
WHERE p.child_id = %(child)s AND NOT p.settled
GROUP BY p.child_id, p.slot

-- name: set_new_status
-- A child just inserted: 'aguardando', or 'cancelada' when a parent failed first.
UPDATE {queue_table}
SET status = %(status)s::varchar, mensagem = %(mensagem)s,
    finished_at = CASE WHEN %(status)s::varchar = 'cancelada' THEN clock_timestamp() END
WHERE id = %(id)s

-- name: first_id
SELECT coalesce(id_inicial, id) FROM {queue_table} WHERE id = %(id)s

-- name: dependents
-- The waiting children of these parents whose edge is not settled yet, every
-- slot of their counts locked (in (child, slot) order, as the release function
-- locks them: none of them counts down meanwhile, so release_child reads them
-- all), and the edges locked until settle_edges flips exactly these edges.
WITH counts AS MATERIALIZED (
    SELECT w.child_id, w.on_parent_failure
    FROM {waiting_table} AS w
    WHERE w.child_id IN (
        SELECT e.child_id FROM {parents_table} AS e
        WHERE e.parent_id = ANY(%(ids)s) AND NOT e.settled
    )
    ORDER BY w.child_id, w.slot
    FOR UPDATE
)
SELECT p.parent_id, p.child_id, w.on_parent_failure
FROM {parents_table} AS p
JOIN (SELECT DISTINCT child_id, on_parent_failure FROM counts) AS w ON w.child_id = p.child_id
WHERE p.parent_id = ANY(%(ids)s) AND NOT p.settled
ORDER BY p.child_id, p.parent_id
FOR UPDATE OF p

-- name: settle_edges
-- These parents finished: their edges are counted once (a retry of the parent
-- that finishes again finds them settled).
UPDATE {parents_table} SET settled = true WHERE parent_id = ANY(%(ids)s) AND NOT settled

-- name: count_down
-- These parents of the child failed (their edges locked and just settled, every
-- slot of its count locked by dependents): the count goes down by their number,
-- taken from its slots in slot order, as the release function takes a success
-- (a slot is a share of the count, not of particular parents).
UPDATE {waiting_table} AS w
SET pending_parents = w.pending_parents - least(w.pending_parents, %(n)s - r.before)
FROM (
    SELECT o.slot, coalesce(sum(o.pending_parents) OVER (
        ORDER BY o.slot ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ), 0) AS before
    FROM {waiting_table} AS o
    WHERE o.child_id = %(child)s AND o.pending_parents > 0
) AS r
WHERE w.child_id = %(child)s AND w.slot = r.slot AND r.before < %(n)s

-- name: release_child
-- Due from now, as the release function's children are (it says why).
UPDATE {queue_table} AS t
SET status = 'pendente', data_hora = greatest(t.data_hora, clock_timestamp())
WHERE t.id = %(child)s AND t.status = 'aguardando'
  AND NOT EXISTS (
      SELECT 1 FROM {waiting_table} AS w WHERE w.child_id = %(child)s AND w.pending_parents > 0
  )

-- name: cancel_waiting
UPDATE {queue_table}
SET status = 'cancelada', mensagem = %(mensagem)s, finished_at = clock_timestamp()
WHERE id = %(child)s AND status = 'aguardando'

-- name: parents_of
-- A child's parents (their first attempts' ids), each with its latest attempt.
SELECT p.parent_id,
       coalesce(
           (SELECT max(a.id) FROM {queue_table} AS a WHERE a.id_inicial = p.parent_id),
           p.parent_id
       ) AS latest_id
FROM {parents_table} AS p
WHERE p.child_id = %(child)s
ORDER BY p.parent_id

-- name: notify_ready
SELECT pg_notify(%(channel)s, '')

-- name: children_of
-- Which of these settled tasks (first attempts' ids) have children.
SELECT DISTINCT parent_id FROM {parents_table} WHERE parent_id = ANY(%(ids)s)

-- name: release_children
-- Every parent in one call: the function locks all their children in id order.
SELECT {release_function}(%(parents)s::bigint[])

-- name: children_of_attempts
-- children_of for attempts' ids (their tasks' first attempts with children).
SELECT DISTINCT p.parent_id
FROM {queue_table} AS t
JOIN {parents_table} AS p ON p.parent_id = coalesce(t.id_inicial, t.id)
WHERE t.id = ANY(%(ids)s)
