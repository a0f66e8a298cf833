-- Named queries of workflows (nsj_queue_lib/workflow/builder.py and view.py), as
-- PostgreSQL's workflow_view.sql.
-- {queue_table}, {parents_table}, {workflows_table} and {workflow_tasks_table}
-- are validated identifiers; every value is a bound parameter.
-- {hot} pins a statement of unfinished rows to the hot partition on the
-- partitioned layout (db/layout_cache.py), else it is empty.

-- name: add_workflow
INSERT INTO {workflows_table} (id, name) VALUES (%(id)s, %(name)s)

-- name: add_workflow_task
INSERT INTO {workflow_tasks_table} (workflow_id, seq, task_id)
VALUES (%(workflow)s, %(seq)s, %(task)s)

-- name: set_waiting
-- The workflow's tasks with parents, just inserted: they wait for them.
UPDATE {queue_table} SET status = 'aguardando' WHERE {hot}id IN %(ids)s

-- name: workflow
-- created_at as seconds since the epoch: an instant whatever the session's time zone.
SELECT id, name, UNIX_TIMESTAMP(created_at) FROM {workflows_table} WHERE id = %(id)s

-- name: workflow_tasks
-- Each task of the workflow (in the order added) as get_task shows it: its
-- latest attempt, with what the view names it by.
SELECT m.seq, {task_view_columns}, t.estouro_tentativas, t.processo, t.chave_externa
FROM {workflow_tasks_table} AS m
JOIN {queue_table} AS t ON t.id = COALESCE(
    (SELECT MAX(a.id) FROM {queue_table} AS a WHERE a.id_inicial = m.task_id),
    m.task_id
)
WHERE m.workflow_id = %(id)s
ORDER BY m.seq

-- name: workflow_edges
-- (parent, child) of each of the workflow's tasks' parents.
SELECT p.parent_id, p.child_id
FROM {workflow_tasks_table} AS m
JOIN {parents_table} AS p ON p.child_id = m.task_id
WHERE m.workflow_id = %(id)s
ORDER BY p.child_id, p.parent_id

-- name: workflow_of_task
SELECT m.workflow_id
FROM {workflow_tasks_table} AS m
WHERE m.task_id = (SELECT COALESCE(t.id_inicial, t.id) FROM {queue_table} AS t WHERE t.id = %(id)s)
