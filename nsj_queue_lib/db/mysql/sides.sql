-- The side tables' rows of purged tasks (nsj_queue_lib/db/side_store.py): every
-- statement takes the candidates' first-attempt ids and reads or deletes by an
-- index of the table it names, so a round costs what it clears, never the side
-- tables' size. Run in the purge round's transaction (plain layout) or in rounds
-- of their own before a day partition is dropped (partitioned layout).

-- name: tables
-- The side tables that exist (an older queue lacks those db_gen --upgrade adds).
SELECT table_name FROM information_schema.tables
WHERE table_schema = COALESCE(%(schema)s, DATABASE()) AND table_name IN %(names)s

-- name: first_attempts
-- Those whose first attempt is still there.
SELECT q.id FROM {queue_table} AS q WHERE q.id IN %(ids)s

-- name: first_attempts_elsewhere
-- The same, the partition about to be dropped (its days: low to bound - 1) left out.
SELECT q.id FROM {queue_table} AS q
WHERE q.id IN %(ids)s AND (q.finished_day < %(low)s OR q.finished_day >= %(bound)s)

-- name: unfinished_tasks
-- Those with a later attempt still to run: on the partitioned layout their first
-- attempt may be gone already (its payload copied). The status is tested after the
-- grouping: in the WHERE clause it let MariaDB read a status-led index, every
-- pending row (1.1 s at 200,000 of them), where the chain index reads the
-- tasks' later attempts alone.
SELECT q.id_inicial FROM {queue_table} AS q
WHERE {hot_q}q.id_inicial IN %(ids)s
GROUP BY q.id_inicial
HAVING MAX(q.status IN ('pendente', 'agendada', 'processando')) = 1

-- name: partition_tasks
-- A day partition's rows after a position, by its primary key: the tasks they
-- belong to.
SELECT p.id, COALESCE(p.id_inicial, p.id) FROM {queue_table} PARTITION ({partition}) AS p
WHERE p.id > %(after)s ORDER BY p.id LIMIT %(limit)s

-- name: edge_ends
-- The other end of each edge of these tasks, as parent or as child.
SELECT p.parent_id FROM {parents_table} AS p WHERE p.child_id IN %(ids)s
UNION
SELECT p.child_id FROM {parents_table} AS p WHERE p.parent_id IN %(ids)s

-- name: delete_edges_as_child
-- Edges whose both ends are purged, one statement per side: each reads by an
-- index of its own (an OR of the two would not, on MariaDB).
DELETE FROM {parents_table} WHERE child_id IN %(ids)s AND parent_id IN %(gone)s

-- name: delete_edges_as_parent
DELETE FROM {parents_table} WHERE parent_id IN %(ids)s AND child_id IN %(gone)s

-- name: delete_waiting
DELETE FROM {waiting_table} WHERE child_id IN %(ids)s

-- name: delete_steps
DELETE FROM {steps_table} WHERE task_id IN %(ids)s

-- name: delete_events
DELETE FROM {events_table} WHERE task_id IN %(ids)s

-- name: delete_process_tasks
DELETE FROM {process_tasks_table} WHERE task_id IN %(ids)s

-- name: workflows_of
SELECT DISTINCT t.workflow_id FROM {workflow_tasks_table} AS t WHERE t.task_id IN %(ids)s

-- name: delete_workflow_tasks
DELETE FROM {workflow_tasks_table} WHERE task_id IN %(ids)s

-- name: delete_workflows
-- Those of these workflows none of whose tasks is left.
DELETE FROM {workflows_table}
WHERE id IN %(ids)s
  AND id NOT IN (
      SELECT t.workflow_id FROM {workflow_tasks_table} AS t WHERE t.workflow_id IN %(ids)s
  )
