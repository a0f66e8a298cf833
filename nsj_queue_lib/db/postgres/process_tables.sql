-- Process instances (nsj_queue_lib/process/, docs/how-to/processes.md). One row
-- per process: the handler's state (a JSON document), status and detail, saved
-- with the commit of the task that set them. corrupted_by: the task whose dead
-- letter corrupted the process (only repair tasks run until one succeeds);
-- timer_task_id: its pending timer (set_timer replaces it); remove_at: when the
-- purge service deletes the process and its history (remove_after).
CREATE TABLE {if_not_exists}{processes_table} (
    process_id varchar(190) NOT NULL PRIMARY KEY,
    processo varchar(250) NOT NULL,
    status varchar(100),
    detail text,
    state text NOT NULL,
    corrupted_by bigint,
    timer_task_id bigint,
    remove_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {idx_process_removal} ON {processes_table} (remove_at)
    WHERE remove_at IS NOT NULL;

-- Each task of a process (its first attempt's id): what it is ('start', 'call',
-- 'repair', 'timer') and, once it succeeded, its handler's response (JSON text),
-- which a synchronous caller reads.
CREATE TABLE {if_not_exists}{process_tasks_table} (
    task_id bigint NOT NULL PRIMARY KEY,
    process_id varchar(190) NOT NULL,
    kind varchar(10) NOT NULL,
    response text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {idx_process_tasks} ON {process_tasks_table} (process_id, task_id);

-- A process's event history (emit), in the order written.
CREATE TABLE {if_not_exists}{process_events_table} (
    id bigserial PRIMARY KEY,
    process_id varchar(190) NOT NULL,
    task_id bigint,
    event_type varchar(100) NOT NULL,
    payload text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {idx_process_events} ON {process_events_table} (process_id, id);
