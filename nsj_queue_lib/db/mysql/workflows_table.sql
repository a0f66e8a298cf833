-- Workflows (nsj_queue_lib/workflow/builder.py, docs/how-to/workflows.md): one
-- row per Workflow enqueued. Its id is its first task's id, so it needs no
-- sequence of its own and a workflow's tasks are found from any of them.
CREATE TABLE {if_not_exists}{workflows_table} (
    id BIGINT NOT NULL PRIMARY KEY,
    name VARCHAR(200) NOT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A workflow's tasks (their first attempts' ids) in the order they were added;
-- the edges between them are the dependencies' (the parents table). task_id is
-- indexed for the console's link from a task to its workflow.
CREATE TABLE {if_not_exists}{workflow_tasks_table} (
    workflow_id BIGINT NOT NULL,
    seq INT NOT NULL,
    task_id BIGINT NOT NULL,
    PRIMARY KEY (workflow_id, seq),
    KEY {idx_workflow_task} (task_id)
) ENGINE=InnoDB;
