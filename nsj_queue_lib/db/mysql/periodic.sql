-- Periodic tasks (runtime/periodic_service.py): the latest slot enqueued per processo.
-- SingleStore reads these too.

-- name: periodic_table_exists
SELECT count(*) > 0 FROM information_schema.tables
WHERE table_schema = COALESCE(%(schema)s, DATABASE()) AND table_name = %(name)s

-- name: periodic_register
-- A processo seen for the first time starts at the slot due now (not replayed).
-- The no-op update leaves an existing row as it is (INSERT IGNORE would hide other errors).
INSERT INTO {periodic_table} (processo, last_slot) VALUES (%(processo)s, %(slot)s)
ON DUPLICATE KEY UPDATE processo = processo

-- name: periodic_lock_timeout
-- A worker holds the row for milliseconds; one frozen in its transaction must not
-- hold the others' periodic threads for long (they retry after the error). The
-- connection is the periodic thread's own, closed after the slot.
SET SESSION innodb_lock_wait_timeout = 10

-- name: periodic_take_slot
-- An UPDATE reads the latest committed row and locks it: a second worker's
-- waits for the first's commit, then finds last_slot moved and changes nothing
-- (or, when the first rolled back or died, moves it itself).
UPDATE {periodic_table} SET last_slot = %(slot)s, updated_at = CURRENT_TIMESTAMP(6)
WHERE processo = %(processo)s AND last_slot < %(slot)s

-- name: periodic_record_task
UPDATE {periodic_table} SET task_id = %(task_id)s WHERE processo = %(processo)s
