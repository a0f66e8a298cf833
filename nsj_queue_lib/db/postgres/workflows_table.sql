-- Workflows (nsj_queue_lib/workflow/builder.py, docs/how-to/workflows.md): one
-- row per Workflow enqueued. Its id is its first task's id, so it needs no
-- sequence of its own and a workflow's tasks are found from any of them.
CREATE TABLE {if_not_exists}{workflows_table} (
    id bigint NOT NULL PRIMARY KEY,
    name varchar(200) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A workflow's tasks (their first attempts' ids) in the order they were added;
-- the edges between them are the dependencies' (the parents table). task_id is
-- indexed for the console's link from a task to its workflow.
CREATE TABLE {if_not_exists}{workflow_tasks_table} (
    workflow_id bigint NOT NULL,
    seq integer NOT NULL,
    task_id bigint NOT NULL,
    PRIMARY KEY (workflow_id, seq)
);
CREATE INDEX IF NOT EXISTS {idx_workflow_task} ON {workflow_tasks_table} (task_id);
