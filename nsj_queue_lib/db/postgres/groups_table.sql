-- Commit groups that hold their tasks without writing them (QUEUE_ONE_WRITE,
-- docs/internals/one-write.md): a group's claim locks its rows, 'pendente',
-- and its worker writes this row on a connection of its own before the first
-- handler runs; the group's commit deletes it. A row whose tasks are still
-- 'pendente' and locked by nobody is a group whose worker died mid-way: the
-- retry service writes those tasks 'processando' and rescues them, which
-- counts their attempt (a task that kills its worker is dead-lettered, not
-- run for ever). Unlogged: a row matters only while its worker lives, and a
-- database crash that empties the table rolls every group back too.
CREATE UNLOGGED TABLE {if_not_exists}{groups_table} (
    -- The worker's name, its process and start, and the group's number there.
    id varchar(400) PRIMARY KEY,
    worker varchar(200) NOT NULL,
    task_ids bigint[] NOT NULL,
    started_at timestamp with time zone NOT NULL DEFAULT clock_timestamp()
);
