-- Periodic tasks (runtime/periodic_service.py): the latest slot enqueued per processo.

-- name: periodic_table_exists
SELECT to_regclass(%(table)s) IS NOT NULL

-- name: periodic_register
-- A processo seen for the first time starts at the slot due now (not replayed).
INSERT INTO {periodic_table} (processo, last_slot) VALUES (%(processo)s, %(slot)s)
ON CONFLICT (processo) DO NOTHING

-- name: periodic_lock_timeout
-- A worker holds the row for milliseconds; one frozen in its transaction must not
-- hold the others' periodic threads for ever (they retry after the error).
SET LOCAL lock_timeout = '10s'

-- name: periodic_take_slot
-- One row in one transaction: a second worker's UPDATE waits for the first's
-- commit, then finds last_slot moved and changes nothing (or, when the first
-- rolled back or died, moves it itself).
UPDATE {periodic_table} SET last_slot = %(slot)s, updated_at = clock_timestamp()
WHERE processo = %(processo)s AND last_slot < %(slot)s

-- name: periodic_record_task
UPDATE {periodic_table} SET task_id = %(task_id)s WHERE processo = %(processo)s
