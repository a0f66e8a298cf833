-- Periodic tasks (docs/periodic-tasks.md): the latest slot enqueued per processo.
-- Workers move last_slot forward with a conditional UPDATE in the transaction
-- that inserts the slot's task, so a slot is enqueued once in the cluster.
CREATE TABLE {if_not_exists}{periodic_table} (
    processo varchar(250) NOT NULL PRIMARY KEY,
    last_slot bigint NOT NULL,  -- Unix seconds (UTC) of the latest slot enqueued
    task_id bigint,
    updated_at timestamp with time zone NOT NULL DEFAULT clock_timestamp()
);
