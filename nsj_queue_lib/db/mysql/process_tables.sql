-- Process instances (nsj_queue_lib/process/, docs/how-to/processes.md). One row
-- per process: the handler's state (a JSON document), status and detail, saved
-- with the commit of the task that set them. corrupted_by: the task whose dead
-- letter corrupted the process (only repair tasks run until one succeeds);
-- timer_task_id: its pending timer (set_timer replaces it); remove_at: when the
-- purge service deletes the process and its history (remove_after).
CREATE TABLE {if_not_exists}{processes_table} (
    process_id VARCHAR(190) NOT NULL PRIMARY KEY,
    processo VARCHAR(250) NOT NULL,
    status VARCHAR(100) NULL,
    detail LONGTEXT NULL,
    state LONGTEXT NOT NULL,
    corrupted_by BIGINT NULL,
    timer_task_id BIGINT NULL,
    remove_at TIMESTAMP(6) NULL DEFAULT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY {idx_process_removal} (remove_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Each task of a process (its first attempt's id): what it is ('start', 'call',
-- 'repair', 'timer') and, once it succeeded, its handler's response (JSON text),
-- which a synchronous caller reads.
CREATE TABLE {if_not_exists}{process_tasks_table} (
    task_id BIGINT NOT NULL PRIMARY KEY,
    process_id VARCHAR(190) NOT NULL,
    kind VARCHAR(10) NOT NULL,
    response LONGTEXT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY {idx_process_tasks} (process_id, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A process's event history (emit), in the order written.
CREATE TABLE {if_not_exists}{process_events_table} (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    process_id VARCHAR(190) NOT NULL,
    task_id BIGINT NULL,
    event_type VARCHAR(100) NOT NULL,
    payload LONGTEXT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY {idx_process_events} (process_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
