-- The tally service's statements (db/tally.py), PostgreSQL. {hot_t} pins a
-- look-up of unfinished attempts to the hot partition (db/postgres/layout.py).

-- name: tally_state
SELECT folded_to, seen FROM {tally_state_table} WHERE id = 1 FOR UPDATE

-- name: tally_start
INSERT INTO {tally_state_table} (id, folded_to, seen) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING

-- name: tally_unfinished_ids
-- The attempts of the range not finished yet: they wait in the open table.
SELECT t.id FROM {queue_table} AS t
WHERE t.id > %(lo)s AND t.id <= %(hi)s AND t.status IN ('pendente', 'agendada', 'processando', 'aguardando')

-- name: tally_add_open
INSERT INTO {tally_open_table} (id) VALUES (%(id)s) ON CONFLICT (id) DO NOTHING

-- name: tally_range_counts
-- The range's finished attempts (those in the open table wait for their turn).
SELECT floor(extract(epoch FROM t.data_hora) / 3600)::bigint AS hour,
       coalesce(t.processo, '') AS processo, t.status,
       count(*) FILTER (WHERE NOT coalesce(t.reenfileirado, false)) AS tasks,
       count(*) FILTER (WHERE t.status IN ('falha', 'falha_processando')) AS failed,
       count(*) FILTER (WHERE t.dead AND t.id_inicial IS NULL) AS dead
FROM {queue_table} AS t
WHERE t.id > %(lo)s AND t.id <= %(hi)s
  AND t.status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')
  AND NOT EXISTS (SELECT 1 FROM {tally_open_table} AS o WHERE o.id = t.id)
GROUP BY 1, 2, 3

-- name: tally_gone_open
-- The open attempts no longer unfinished (a look-up in the hot partition).
SELECT o.id FROM {tally_open_table} AS o
WHERE NOT EXISTS (
    SELECT 1 FROM {queue_table} AS t
    WHERE {hot_t}t.id = o.id AND t.status IN ('pendente', 'agendada', 'processando', 'aguardando')
)
LIMIT %(limit)s

-- name: tally_ended_rows
SELECT t.id, floor(extract(epoch FROM t.data_hora) / 3600)::bigint AS hour,
       coalesce(t.processo, '') AS processo, t.status,
       NOT coalesce(t.reenfileirado, false) AS task,
       t.status IN ('falha', 'falha_processando') AS failed,
       t.dead AND t.id_inicial IS NULL AS dead
FROM {queue_table} AS t
WHERE t.id = ANY(%(ids)s::bigint[]) AND t.status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')

-- name: tally_close_open
DELETE FROM {tally_open_table} WHERE id = ANY(%(ids)s::bigint[])

-- name: tally_add
INSERT INTO {tally_table} AS a (hour, processo, status, tasks, failed, dead)
VALUES (%(hour)s, %(processo)s, %(status)s, %(tasks)s, %(failed)s, %(dead)s)
ON CONFLICT (hour, processo, status) DO UPDATE SET
    tasks = a.tasks + EXCLUDED.tasks, failed = a.failed + EXCLUDED.failed, dead = a.dead + EXCLUDED.dead

-- name: tally_hour
SELECT floor(extract(epoch FROM now()) / 3600)::bigint

-- name: tally_old_hours
-- Hours older than the last two days, merged into the first hour of their day.
SELECT hour / 24 * 24, processo, status, sum(tasks), sum(failed), sum(dead)
FROM {tally_table}
WHERE hour < %(before)s AND hour %% 24 <> 0
GROUP BY 1, 2, 3

-- name: tally_drop_old_hours
DELETE FROM {tally_table} WHERE hour < %(before)s AND hour %% 24 <> 0

-- name: tally_max_id
SELECT coalesce(max(id), 0) FROM {queue_table}

-- name: tally_advance
UPDATE {tally_state_table} SET folded_to = %(hi)s, seen = %(seen)s, folded_at = now() WHERE id = 1

-- name: tally_expire
-- Hours the purge has emptied (QUEUE_PURGE_MAX_AGE).
DELETE FROM {tally_table}
WHERE hour < floor(extract(epoch FROM now() - make_interval(days => %(max_age_days)s)) / 3600)
