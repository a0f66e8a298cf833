-- The side tables' rows of purged tasks (nsj_queue_lib/db/side_store.py): every
-- statement takes the candidates' first-attempt ids and reads or deletes by an
-- index of the table it names, so a round costs what it clears, never the side
-- tables' size. Run in the purge round's transaction (plain layout) or in rounds
-- of their own before a day partition is dropped (partitioned layout).

-- name: tables
-- The side tables that exist (an older queue lacks those db_gen --upgrade adds).
SELECT t.name FROM unnest(%(names)s::text[]) AS t(name) WHERE to_regclass(t.name) IS NOT NULL

-- name: first_attempts
-- Those whose first attempt is still there.
SELECT q.id FROM {queue_table} AS q WHERE q.id = ANY(%(ids)s)

-- name: first_attempts_elsewhere
-- The same, the partition about to be dropped (its days: low to bound - 1) left out.
SELECT q.id FROM {queue_table} AS q
WHERE q.id = ANY(%(ids)s) AND (q.finished_day < %(low)s OR q.finished_day >= %(bound)s)

-- name: unfinished_tasks
-- Those with a later attempt still to run (the chain index's rows): on the
-- partitioned layout their first attempt may be gone already (its payload copied).
SELECT DISTINCT q.id_inicial FROM {queue_table} AS q
WHERE {hot_q}q.id_inicial = ANY(%(ids)s) AND q.id_inicial IS NOT NULL
  AND q.status IN ('pendente', 'agendada', 'processando')

-- name: partition_tasks
-- A day partition's rows after a position, by its primary key: the tasks they
-- belong to.
SELECT p.id, coalesce(p.id_inicial, p.id) FROM {partition} AS p
WHERE p.id > %(after)s ORDER BY p.id LIMIT %(limit)s

-- name: edge_ends
-- The other end of each edge of these tasks, as parent or as child.
SELECT p.parent_id FROM {parents_table} AS p WHERE p.child_id = ANY(%(ids)s)
UNION
SELECT p.child_id FROM {parents_table} AS p WHERE p.parent_id = ANY(%(ids)s)

-- name: delete_edges_as_child
-- Edges whose both ends are purged, one statement per side: each reads by an
-- index of its own (an OR of the two would not, on MariaDB).
DELETE FROM {parents_table} WHERE child_id = ANY(%(ids)s) AND parent_id = ANY(%(gone)s)

-- name: delete_edges_as_parent
DELETE FROM {parents_table} WHERE parent_id = ANY(%(ids)s) AND child_id = ANY(%(gone)s)

-- name: delete_waiting
DELETE FROM {waiting_table} WHERE child_id = ANY(%(ids)s)

-- name: delete_steps
DELETE FROM {steps_table} WHERE task_id = ANY(%(ids)s)

-- name: delete_events
DELETE FROM {events_table} WHERE task_id = ANY(%(ids)s)

-- name: delete_process_tasks
DELETE FROM {process_tasks_table} WHERE task_id = ANY(%(ids)s)

-- name: delete_workflow_tasks
DELETE FROM {workflow_tasks_table} WHERE task_id = ANY(%(ids)s) RETURNING workflow_id

-- name: delete_workflows
-- Those of these workflows none of whose tasks is left. The tasks left are read by
-- the primary key's prefix: as NOT EXISTS, the planner hashed the whole task list
-- while it was small (65,000 rows read for 5,000 tasks at 15,000 rows).
DELETE FROM {workflows_table} AS w
WHERE w.id = ANY(%(ids)s)
  AND w.id NOT IN (
      SELECT t.workflow_id FROM {workflow_tasks_table} AS t WHERE t.workflow_id = ANY(%(ids)s)
  )
