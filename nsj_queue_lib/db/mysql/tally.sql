-- The tally service's statements (db/tally.py), MySQL / MariaDB. Reads are
-- plain (consistent, locking nothing the workers write); the writes go to the
-- tally's own tables.

-- name: tally_state
SELECT folded_to, seen FROM {tally_state_table} WHERE id = 1 FOR UPDATE

-- name: tally_start
INSERT IGNORE INTO {tally_state_table} (id, folded_to, seen) VALUES (1, 0, 0)

-- name: tally_unfinished_ids
-- The attempts of the range not finished yet: they wait in the open table.
SELECT t.id FROM {queue_table} AS t
WHERE t.id > %(lo)s AND t.id <= %(hi)s AND t.status IN ('pendente', 'agendada', 'processando', 'aguardando')

-- name: tally_add_open
INSERT IGNORE INTO {tally_open_table} (id) VALUES (%(id)s)

-- name: tally_range_counts
-- The range's finished attempts (those in the open table wait for their turn).
SELECT FLOOR(UNIX_TIMESTAMP(t.data_hora) / 3600) AS hour,
       COALESCE(t.processo, '') AS processo, t.status,
       SUM(NOT COALESCE(t.reenfileirado, false)) AS tasks,
       SUM(t.status IN ('falha', 'falha_processando')) AS failed,
       SUM(t.dead AND t.id_inicial IS NULL) AS dead
FROM {queue_table} AS t
WHERE t.id > %(lo)s AND t.id <= %(hi)s
  AND t.status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')
  AND NOT EXISTS (SELECT 1 FROM {tally_open_table} AS o WHERE o.id = t.id)
GROUP BY 1, 2, 3

-- name: tally_gone_open
-- The open attempts no longer unfinished (pinned to the hot partition where the
-- layout has one: a look-up there alone, not one per partition).
SELECT o.id FROM {tally_open_table} AS o
WHERE NOT EXISTS (
    SELECT 1 FROM {queue_table} AS t
    WHERE {hot_t}t.id = o.id AND t.status IN ('pendente', 'agendada', 'processando', 'aguardando')
)
LIMIT %(limit)s

-- name: tally_ended_rows
SELECT t.id, FLOOR(UNIX_TIMESTAMP(t.data_hora) / 3600) AS hour,
       COALESCE(t.processo, '') AS processo, t.status,
       NOT COALESCE(t.reenfileirado, false) AS task,
       t.status IN ('falha', 'falha_processando') AS failed,
       t.dead AND t.id_inicial IS NULL AS dead
FROM {queue_table} AS t
WHERE t.id IN %(ids)s AND t.status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')

-- name: tally_close_open
DELETE FROM {tally_open_table} WHERE id IN %(ids)s

-- name: tally_add
INSERT INTO {tally_table} (hour, processo, status, tasks, failed, dead)
VALUES (%(hour)s, %(processo)s, %(status)s, %(tasks)s, %(failed)s, %(dead)s)
ON DUPLICATE KEY UPDATE
    tasks = tasks + %(tasks)s, failed = failed + %(failed)s, dead = dead + %(dead)s

-- name: tally_hour
SELECT FLOOR(UNIX_TIMESTAMP(NOW(6)) / 3600)

-- name: tally_old_hours
-- Hours older than the last two days, merged into the first hour of their day.
SELECT hour DIV 24 * 24, processo, status, SUM(tasks), SUM(failed), SUM(dead)
FROM {tally_table}
WHERE hour < %(before)s AND MOD(hour, 24) <> 0
GROUP BY 1, 2, 3

-- name: tally_drop_old_hours
DELETE FROM {tally_table} WHERE hour < %(before)s AND MOD(hour, 24) <> 0

-- name: tally_max_id
SELECT COALESCE(MAX(id), 0) FROM {queue_table}

-- name: tally_advance
UPDATE {tally_state_table} SET folded_to = %(hi)s, seen = %(seen)s, folded_at = NOW(6) WHERE id = 1

-- name: tally_expire
-- Hours the purge has emptied (QUEUE_PURGE_MAX_AGE).
DELETE FROM {tally_table}
WHERE hour < FLOOR((UNIX_TIMESTAMP(NOW(6)) - %(max_age_days)s * 86400) / 3600)
