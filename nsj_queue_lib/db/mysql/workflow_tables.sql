-- Dependencies between tasks (docs/how-to/dependencies.md, nsj_queue_lib/workflow/).
-- One row per (parent, child): parent_id is the parent's first attempt's id
-- (its id_inicial), child_id the child's. The claim procedure and the group's
-- end look a settled task up here by parent_id; parents() reads by child_id.
CREATE TABLE {if_not_exists}{parents_table} (
    parent_id BIGINT NOT NULL,
    child_id BIGINT NOT NULL,
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

-- The children of a settled parent (its first attempt's id), released in the
-- settling transaction: each child's count goes down by one, and those whose
-- count reaches 0 become 'pendente'. Two statements whatever the number of
-- children: no query per child. The subqueries are locking reads (InnoDB
-- reads the tables an UPDATE's subquery names with shared locks, as of their
-- latest commit), so a child committed after the handler's snapshot counts.
{drop_release_procedure}DELIMITER //
CREATE PROCEDURE {release_function}(IN p_parent BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    UPDATE {waiting_table} AS w
    SET w.pending_parents = w.pending_parents - 1
    WHERE w.child_id IN (SELECT p.child_id FROM {parents_table} AS p WHERE p.parent_id = p_parent);
    UPDATE {table} AS t
    SET t.status = 'pendente'
    WHERE t.status = 'aguardando' AND t.id IN (
        SELECT w.child_id FROM {waiting_table} AS w
        WHERE w.pending_parents <= 0 AND w.child_id IN (
            SELECT p.child_id FROM {parents_table} AS p WHERE p.parent_id = p_parent
        )
    );
END//
DELIMITER ;
