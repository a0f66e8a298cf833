-- Dependencies between tasks (docs/how-to/dependencies.md, nsj_queue_lib/workflow/).
-- One row per (parent, child): parent_id is the parent's first attempt's id
-- (its id_inicial), child_id the child's. The claim procedure and the group's
-- end look a settled task up here by parent_id; parents() reads by child_id.
-- settled: the parent's end has been counted in the child's pending_parents (or
-- it had ended when the child was inserted); an edge is counted only when this
-- flips, so once whatever the parent does next (a retry by hand).
CREATE TABLE {if_not_exists}{parents_table} (
    parent_id BIGINT NOT NULL,
    child_id BIGINT NOT NULL,
    settled BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (parent_id, child_id),
    KEY {idx_parents_child} (child_id)
) ENGINE=InnoDB;

-- A child in 'aguardando': how many of its parents have not finished yet, and
-- what a parent that ends dead-lettered or 'cancelada' does to it ('cancel':
-- the child is cancelled; 'run': it counts as finished).
CREATE TABLE {if_not_exists}{waiting_table} (
    child_id BIGINT NOT NULL PRIMARY KEY,
    pending_parents INT NOT NULL,
    on_parent_failure VARCHAR(10) NOT NULL DEFAULT 'cancel'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Durable steps and waits (docs/how-to/durable-steps.md, nsj_queue_lib/workflow/steps.py):
-- one checkpoint per (task, name), task_id being the task's first attempt's id
-- (its id_inicial), so every attempt of the task finds it. result is the step's
-- JSON result, committed with the step's writes; attempt_id the attempt that
-- wrote it. A durable wait's checkpoint names the event it waits for in
-- waiting_for until the event arrives (send_event looks there).
CREATE TABLE {if_not_exists}{steps_table} (
    task_id BIGINT NOT NULL,
    name VARCHAR(200) NOT NULL,
    result LONGTEXT NOT NULL,
    attempt_id BIGINT NOT NULL,
    waiting_for VARCHAR(200) NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (task_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The events sent to tasks (QueueClient.send_event), kept whether or not the
-- task waits for them yet; task_id is the task's first attempt's id. A task's
-- n-th wait_event of a name gets its n-th event of that name (by id).
CREATE TABLE {if_not_exists}{events_table} (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_id BIGINT NOT NULL,
    name VARCHAR(200) NOT NULL,
    payload LONGTEXT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY {idx_events_task} (task_id, name, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The children of a settled parent (its first attempt's id), released in the
-- settling transaction: its unsettled edges flip and each of their children's
-- count goes down by one, then those whose count reaches 0 become 'pendente'.
-- Three statements whatever the number of children: no query per child. The
-- first reads the parent's edges in primary key order (STRAIGHT_JOIN: edges
-- first), so the children's counts are locked in child id order, as every
-- other settling transaction locks them: no deadlock between two parents with
-- shared children. The second settles edges of children no longer waiting.
-- Their reads are locking reads (InnoDB reads the tables an UPDATE joins but does not
-- change with shared locks, as of their latest commit), so a child committed after
-- the handler's snapshot counts. The third joins from the parent's
-- edges to its children by key (STRAIGHT_JOIN): MariaDB 10.11 runs an UPDATE's
-- IN (subquery) once per row of the updated table, which read every waiting task of
-- the queue at each release; the children are unfinished, so on the partitioned
-- layout the join is pinned to the hot partition (by id alone: every partition).
{drop_release_procedure}DELIMITER //
CREATE PROCEDURE {release_function}(IN p_parent BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    UPDATE {parents_table} AS p STRAIGHT_JOIN {waiting_table} AS w ON w.child_id = p.child_id
    SET w.pending_parents = w.pending_parents - 1, p.settled = TRUE
    WHERE p.parent_id = p_parent AND NOT p.settled;
    UPDATE {parents_table} SET settled = TRUE WHERE parent_id = p_parent AND NOT settled;
    UPDATE {parents_table} AS p
        STRAIGHT_JOIN {waiting_table} AS w ON w.child_id = p.child_id
        STRAIGHT_JOIN {table} AS t ON {hot_t}t.id = w.child_id
    SET t.status = 'pendente'
    WHERE p.parent_id = p_parent AND w.pending_parents <= 0 AND t.status = 'aguardando';
END//
DELIMITER ;
