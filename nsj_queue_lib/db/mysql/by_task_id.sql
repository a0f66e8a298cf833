-- What a client needs before its statements by task id (db/layout_cache.py,
-- db/latest_attempt.py): the queue table's layout, and a task's latest attempt
-- locked without locking a gap. {lock} is FOR UPDATE or LOCK IN SHARE MODE;
-- {day_of_t} and {at_day} name the partition key on the partitioned layout
-- (NULL and nothing on a plain table).

-- name: layout
-- Whether the queue table is partitioned (db/mysql/layout.py): its hot partition.
SELECT count(*)
FROM information_schema.PARTITIONS
WHERE TABLE_SCHEMA = COALESCE(%(schema)s, DATABASE()) AND TABLE_NAME = %(table)s
  AND PARTITION_NAME = 'p_hot'

-- name: latest_seen
-- A consistent read: the attempt the caller's snapshot sees as the task's latest.
SELECT t.id, {day_of_t}
FROM {queue_table} AS t
JOIN (SELECT COALESCE(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s) AS task
WHERE t.id = COALESCE(
    (SELECT MAX(a.id) FROM {queue_table} AS a WHERE a.id_inicial = task.first_id),
    task.first_id
)

-- name: latest_row
-- That attempt by its whole key: a record lock alone, its latest committed version.
SELECT {columns}
FROM {queue_table} AS t
WHERE {at_day}t.id = %(id)s
{lock}

-- name: searched_first
-- The fall-back's searching locking reads, which see every commit.
SELECT COALESCE(id_inicial, id) FROM {queue_table} WHERE id = %(id)s {lock}

-- name: searched_latest
SELECT MAX(id) FROM {queue_table} WHERE id_inicial = %(first)s {lock}

-- name: searched_row
SELECT {columns}
FROM {queue_table} AS t
WHERE t.id = %(id)s
{lock}
