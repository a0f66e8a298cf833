-- Named queries of the MySQL / MariaDB dialect (PyMySQL, %(name)s and %s
-- parameters; a list parameter is sent as a parenthesized list).
-- {queue_table} and {subscriber_table} are validated identifiers; every
-- value is a bound parameter.
--
-- MySQL has no UPDATE ... RETURNING and no data-modifying CTE, so an
-- operation that PostgreSQL does in one statement may take several here: its
-- statements are the "-- step: <name>" sections of one named query, run in
-- that order by the store inside one transaction.
--
-- NOW(6) is the statement's start time in the session's time zone; the
-- workers' sessions use UTC (see db/mysql/driver.py).
--
-- {hot} / {hot_t} pin a statement of unfinished rows to the hot partition of a
-- partitioned table, and {finished_day_set} is a settle's partition key
-- (db/mysql/layout.py); all three are empty on a plain table.

-- name: insert_task
-- The store appends one VALUES row: an absent data_hora is DEFAULT (the
-- column's exact CURRENT_TIMESTAMP(6), the same instant for both columns).
-- step: head
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial
) VALUES
-- step: returning
-- MariaDB only; MySQL reads the id from LAST_INSERT_ID().
RETURNING id

-- name: insert_task_keyed
-- insert_task with a dedupe_key, a lock_key, overrides (max_retry, timeout_s,
-- next_try_priority: docs/fleet-control.md) or a fair_key (fleet/fair.py), and
-- inserts with a trace context:
-- a duplicate-key error on the dedupe index when an unfinished task holds the
-- dedupe_key (MySQL rolls back that statement only). Plain inserts name none of
-- these columns, so that a client keeps working on a table db_gen --upgrade has
-- not reached yet.
-- step: head
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash, tenant,
    grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial, dedupe_key, lock_key,
    trace_context, max_retry, timeout_s, next_try_priority, fair_key
) VALUES
-- step: returning
RETURNING id

-- name: fair_turn
-- The turn of a task with a fair_key and no data_hora (fleet/fair.py), as seconds since
-- 1970 (exact to the microsecond, whatever the session's time zone): a microsecond after
-- its key's last ready task of its prioridade, never before the first ready task of that
-- prioridade, never after now. MySQL refuses a subquery on the table an INSERT ... VALUES
-- writes: the store reads this first, in the same transaction. Both look-ups are index
-- reads (idx_fair_key, idx_claim); {hot} keeps them to p_hot on the partitioned layout
-- (unpinned, each read every day partition's index: 2.4 ms against 0.9 at 78 of them).
SELECT UNIX_TIMESTAMP(LEAST(NOW(6), COALESCE(
    GREATEST(x.last_turn + INTERVAL 1 MICROSECOND, x.head), x.head, NOW(6)
))) AS turn
FROM (SELECT
    (SELECT MAX(data_hora) FROM {queue_table}
     WHERE {hot}fair_key = %(fair_key)s AND fair_key_status = 'pendente'
       AND prioridade = %(prioridade)s AND data_hora <= NOW(6)) AS last_turn,
    -- ORDER BY ... LIMIT 1, not MIN(): MIN read every entry of the prioridade here.
    (SELECT data_hora FROM {queue_table}
     WHERE {hot}status = 'pendente' AND prioridade = %(prioridade)s
     ORDER BY data_hora LIMIT 1) AS head
) AS x

-- name: dedupe_holder
-- The unfinished task holding a dedupe_key. A locking read sees the latest
-- committed row, which a REPEATABLE READ snapshot taken earlier would not.
SELECT COALESCE(id_inicial, id) AS id_inicial
FROM {queue_table}
WHERE {hot}dedupe_active = %(dedupe_key)s
LOCK IN SHARE MODE

-- name: insert_tasks
-- One statement for many tasks: the store appends one VALUES row per task,
-- in the caller's order. Ids: RETURNING on MariaDB (rows come back in VALUES
-- order); on MySQL LAST_INSERT_ID() is the first row's id and InnoDB gives
-- one simple multi-row INSERT consecutive ids (auto_increment_increment apart).
-- step: head
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial
) VALUES
-- step: returning
RETURNING id

-- name: list_equivalent
SELECT {task_columns}
FROM {queue_table} AS t
WHERE t.chave_externa <=> %(chave_externa)s
  AND t.payload_hash <=> %(payload_hash)s
  AND t.status IN %(statuses)s
ORDER BY t.id

-- name: get_task
SELECT {task_columns_resolved}
FROM {queue_table} AS t
LEFT JOIN {queue_table} AS first_attempt
       ON first_attempt.id = t.id_inicial AND t.payload IS NULL
WHERE t.id = %(id)s

-- name: claim_tasks
-- The claim itself is the claim procedure (claim_procedure.sql); these steps
-- serve it, and the claim of a worker whose liveness locks live in the
-- socket server (claim_uncommitted): the next ready row in claim order,
-- read through the claim index and locked without waiting on rows another
-- worker is claiming, then marked 'processando' before the claim commits.
-- step: select
SELECT {claimed_columns}
FROM {queue_table} AS t
WHERE {hot_t}t.status = 'pendente' AND t.data_hora <= NOW(6) AND {lock_key_free}
  AND {deliverable}
  AND {limits_free}
ORDER BY t.prioridade DESC, t.data_hora, t.id
LIMIT 1
FOR UPDATE SKIP LOCKED;
-- step: mark
UPDATE {queue_table}
SET status = 'processando', started_at = NOW(6), worker = %(worker)s
WHERE {hot}id = %(id)s AND status = 'pendente';
-- step: first_payloads
-- Later attempts keep no payload of their own: it comes from the first attempt.
SELECT id, payload
FROM {queue_table}
WHERE id IN %(ids)s;
-- step: release_claimed
-- After a failed CALL: the liveness lock its claim may have taken
-- (RELEASE_LOCK leaves alone a lock of another session, and NULL is no lock).
DO RELEASE_LOCK(CONCAT(%(lock_prefix)s, @nsjq_claimed));
-- step: procedure_version
-- The claim procedure's COMMENT, when the procedure exists (checked at start).
SELECT routine_comment
FROM information_schema.routines
WHERE routine_schema = COALESCE(%(schema)s, DATABASE())
  AND routine_name = %(name)s
  AND routine_type = 'PROCEDURE'

-- name: next_due
-- Seconds until the next waiting row becomes ready, by the database's clock
-- (NULL when none is waiting). A retry ('agendada') already due gives a
-- negative number: it must be promoted now. One MIN per status reads one index entry each.
SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), MIN(due.at)) / 1000000 AS seconds
FROM (
    SELECT MIN(data_hora) AS at FROM {queue_table}
    WHERE {hot}status = 'pendente' AND data_hora > NOW(6)
    UNION ALL
    SELECT MIN(data_hora) FROM {queue_table}
    WHERE {hot}status = 'agendada'
) AS due

-- name: unlock_task
DO RELEASE_LOCK(%(name)s)

-- name: fail_and_retry
-- Ends a 'processando' attempt as failed and inserts the next attempt, due
-- at the failure time plus the back-off (attempt_step 0: with the same
-- tentativa, a held attempt that used none of max_retry), from the failed row as it ended.
-- Nothing happens when the row is no longer 'processando' (another worker
-- already settled it): the store skips the insert when mark changed no row.
-- step: mark
UPDATE {queue_table}
SET status = %(status)s,
    mensagem = %(mensagem)s,
    reenfileirado = true,
    proxima_tentativa = NOW(6) + INTERVAL %(delay_us)s MICROSECOND,
    finished_at = NOW(6){finished_day_set}
WHERE {hot}id = %(id)s AND status = 'processando';
-- step: insert
INSERT INTO {queue_table} (
    id_inicial, data_hora_inicial, data_hora, origem, destino, processo, chave_externa,
    tentativa, status, id_anterior, data_hora_anterior, status_anterior, mensagem_anterior,
    tenant, grupo_empresarial, payload_hash, pub_sub, publication_id, subscriber_id,
    dead, live_id, prioridade, dedupe_key, lock_key, trace_context,
    max_retry, timeout_s, next_try_priority, fair_key, payload
)
SELECT
    COALESCE(f.id_inicial, f.id), f.data_hora_inicial, f.proxima_tentativa, f.origem, f.destino,
    f.processo, f.chave_externa, f.tentativa + %(attempt_step)s, 'agendada', f.id, f.data_hora, f.status,
    f.mensagem, f.tenant, f.grupo_empresarial, f.payload_hash, f.pub_sub, f.publication_id,
    f.subscriber_id, f.dead, f.live_id,
    -- The retry's prioridade: the task's next_try_priority when it was given one.
    COALESCE(f.next_try_priority, f.prioridade), f.dedupe_key,
    f.lock_key, f.trace_context, f.max_retry, f.timeout_s, f.next_try_priority, f.fair_key,
    -- A later attempt holds a payload only when the partitioned layout's retention copied
    -- the first attempt's before dropping its day: the next attempt keeps it too.
    CASE WHEN f.id_inicial IS NOT NULL THEN f.payload END
FROM {queue_table} AS f
WHERE f.id = %(id)s

-- name: fail_and_bury
-- The last attempt failed: mark the overflow and enqueue the dead-letter task.
-- step: mark
UPDATE {queue_table}
SET status = %(status)s, mensagem = %(mensagem)s, estouro_tentativas = true,
    finished_at = NOW(6){finished_day_set}
WHERE {hot}id = %(id)s AND status = 'processando';
-- step: insert
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, tentativa, status, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, publication_id, subscriber_id, dead, live_id, prioridade,
    trace_context
)
SELECT
    f.origem, f.destino, f.processo, f.chave_externa, 1, 'pendente', %(payload)s, f.payload_hash,
    f.tenant, f.grupo_empresarial, f.pub_sub, f.publication_id, f.subscriber_id, true,
    COALESCE(f.id_inicial, f.id), f.prioridade, f.trace_context
FROM {queue_table} AS f
WHERE f.id = %(id)s

-- name: fail_final
-- A dead-letter task ran out of attempts: nothing further is enqueued.
UPDATE {queue_table}
SET status = %(status)s, mensagem = %(mensagem)s, estouro_tentativas = true,
    finished_at = NOW(6){finished_day_set}
WHERE {hot}id = %(id)s AND status = 'processando'

-- name: release_task
-- Gives a claimed task that never started back to the queue (as unstarted).
UPDATE {queue_table}
SET status = 'pendente', started_at = NULL, worker = NULL
WHERE {hot}id = %(id)s AND status = 'processando'

-- name: try_service_lock
SELECT GET_LOCK(%(name)s, 0)

-- name: service_unlock
DO RELEASE_LOCK(%(name)s)

-- name: find_orphans
-- 'processando' rows with no live worker: nobody holds their liveness lock
-- and no transaction holds their row. The row locks taken here make a worker
-- that is just settling the task wait and then see the new status.
-- First a plain read finds the candidates: a locking scan would keep every
-- running row it passed locked until the caller commits (InnoDB keeps the
-- locks of rows a locking read did not return), stalling live workers. Then
-- only the candidates are locked, by primary key, skipping the rows a worker
-- is settling right now, and checked again.
-- step: candidates
SELECT t.id
FROM {queue_table} AS t
WHERE {hot_t}t.status = 'processando'
  -- In client/server mode the liveness locks live in the socket server: the
  -- caller asks it which of these rows are still held.
  AND (NOT %(check_db_locks)s OR IS_USED_LOCK(CONCAT(%(lock_prefix)s, t.id)) IS NULL)
ORDER BY t.data_hora, t.id
LIMIT %(limit)s;
-- step: lock
SELECT t.id
FROM {queue_table} AS t
WHERE {hot_t}t.id IN %(ids)s
  AND t.status = 'processando'
  AND (NOT %(check_db_locks)s OR IS_USED_LOCK(CONCAT(%(lock_prefix)s, t.id)) IS NULL)
ORDER BY t.id
FOR UPDATE SKIP LOCKED;
-- step: rows
SELECT {claimed_columns_resolved}
FROM {queue_table} AS t
LEFT JOIN {queue_table} AS first_attempt
       ON first_attempt.id = t.id_inicial AND t.payload IS NULL
WHERE t.id IN %(ids)s
ORDER BY t.id

-- name: promote_due
-- Retries and scheduled rows whose time has come become 'pendente'.
-- step: select
SELECT id
FROM {queue_table}
WHERE {hot}status = 'agendada' AND data_hora <= NOW(6)
ORDER BY data_hora, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
-- step: mark
UPDATE {queue_table}
SET status = 'pendente'
WHERE {hot}id IN %(ids)s AND status = 'agendada'

-- name: count_stale_pending
-- ORDER BY data_hora makes the (status, data_hora) index the way in: one probe.
SELECT count(*) FROM (
    SELECT 1 FROM {queue_table}
    WHERE {hot}status = 'pendente'
      AND data_hora <= NOW(6) - INTERVAL %(wait_us)s MICROSECOND
    ORDER BY data_hora
    LIMIT 1
) AS stale

-- name: purge
-- One bounded round: old rows that are settled, never a first attempt whose
-- later attempts still need its payload. MySQL cannot DELETE from a table
-- while a subquery of the same statement reads it with a LIMIT, so the ids
-- are read first (a plain read: settled rows are never locked by workers)
-- and deleted by id, status checked again.
-- step: select
SELECT o.id, COALESCE(o.id_inicial, o.id)
FROM {queue_table} AS o
WHERE o.data_hora < NOW(6) - INTERVAL %(max_age_days)s DAY
  AND o.status NOT IN ('pendente', 'agendada', 'processando')
  AND o.status <> 'aguardando'
  AND NOT EXISTS (
      SELECT 1 FROM {queue_table} AS a
      WHERE a.id_inicial = COALESCE(o.id_inicial, o.id)
        AND a.status IN ('pendente', 'agendada', 'processando')
  )
ORDER BY o.data_hora
LIMIT %(limit)s;
-- step: delete
DELETE FROM {queue_table}
WHERE id IN %(ids)s
  AND status NOT IN ('pendente', 'agendada', 'processando')
  AND status <> 'aguardando'

-- name: queue_oid
-- MySQL has no oid: the store derives a stable number from the qualified
-- table name; this only checks that the table exists.
SELECT count(*)
FROM information_schema.tables
WHERE table_schema = COALESCE(%(schema)s, DATABASE()) AND table_name = %(table)s

-- name: insert_deliveries
-- One task per subscriber of a publication, in the publication's transaction;
-- the store appends one VALUES row per delivery (as insert_tasks).
-- step: head
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, tenant, grupo_empresarial, prioridade,
    publication_id, subscriber_id, payload, payload_hash, trace_context
) VALUES
-- step: returning
RETURNING id

-- name: list_subscribers
SELECT {subscriber_columns}
FROM {subscriber_table} AS s
WHERE s.processo = %(processo)s
  AND s.ativo
  AND (s.tenant IS NULL OR s.tenant = %(tenant)s)
  AND (s.grupo_empresarial IS NULL OR s.grupo_empresarial = %(grupo_empresarial)s)
ORDER BY s.id

-- name: task_view
-- A task as its user sees it (QueueClient.get_task), for any attempt's id: its
-- latest attempt. Later attempts carry the first attempt's id in id_inicial.
-- cancel_task's view, locked, is by_task_id.sql's (db/latest_attempt.py).
SELECT {task_view_columns}
FROM {queue_table} AS t
JOIN (SELECT COALESCE(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s) AS task
WHERE t.id = COALESCE(
    (SELECT MAX(a.id) FROM {queue_table} AS a WHERE a.id_inicial = task.first_id),
    task.first_id
)

-- name: cancel_attempt
-- A waiting attempt becomes 'cancelada'; a running one keeps running with its
-- cancel request recorded. mensagem and finished_at are assigned before
-- status: MySQL evaluates SET left to right. Nothing happens to a finished attempt.
-- step: mark
UPDATE {queue_table}
SET mensagem = CASE WHEN status = 'processando' THEN mensagem ELSE %(mensagem)s END,
    finished_at = CASE WHEN status = 'processando' THEN finished_at ELSE NOW(6) END,
    status = CASE WHEN status = 'processando' THEN status ELSE 'cancelada' END,
    cancel_requested = true
WHERE {hot}id = %(id)s AND status IN ('pendente', 'agendada', 'processando', 'aguardando');
-- step: status
SELECT status FROM {queue_table} WHERE id = %(id)s

-- name: cancel_running
-- The handler stopped on a cancel request (it raised TaskCancelled).
UPDATE {queue_table}
SET status = 'cancelada', mensagem = %(mensagem)s, finished_at = NOW(6){finished_day_set}
WHERE {hot}id = %(id)s AND status = 'processando'

-- name: cancel_if_requested
-- A failed or abandoned attempt whose cancel was requested ends 'cancelada'
-- instead of being retried. The row is locked either way, so a cancel_attempt
-- running meanwhile waits and then finds the attempt settled.
-- step: lock
SELECT cancel_requested
FROM {queue_table}
WHERE {hot}id = %(id)s AND status = 'processando'
FOR UPDATE;
-- step: mark
UPDATE {queue_table}
SET status = 'cancelada', mensagem = %(mensagem)s, finished_at = NOW(6){finished_day_set}
WHERE {hot}id = %(id)s AND status = 'processando'

-- name: cancel_requests
-- Which of a worker's running attempts have a cancel request (its poll).
SELECT id
FROM {queue_table}
WHERE {hot}id IN %(ids)s AND status = 'processando' AND cancel_requested

-- name: report_progress
-- Written by the worker outside the handler's transaction, while the attempt runs.
UPDATE {queue_table}
SET progress_done = %(done)s, progress_total = %(total)s, progress_message = %(message)s
WHERE {hot}id = %(id)s AND status = 'processando'

-- name: lifecycle_columns
-- Checked at start: a table from before db_gen --upgrade lacks them.
SELECT {lifecycle_columns} FROM {queue_table} WHERE 1 = 0

-- name: worker_seen
-- A worker's row in the workers table, at start and every heartbeat
-- (runtime/registry.py): the processos it claims, a JSON array or NULL.
INSERT INTO {workers_table} (worker, processos)
VALUES (%(worker)s, %(processos)s)
ON DUPLICATE KEY UPDATE processos = %(processos)s, seen_at = CURRENT_TIMESTAMP(6)

-- name: worker_left
-- A worker that stops removes its row.
DELETE FROM {workers_table} WHERE worker = %(worker)s

-- name: table_health
-- The queue table's statistics, for the vacuum service (db/mysql/statistics.py).
-- InnoDB's count of rows changed since its statistics were last calculated
-- (by ANALYZE TABLE or by InnoDB itself); the table is listed while InnoDB
-- keeps it in its dictionary cache, as a table in use is. Reading it needs
-- the PROCESS privilege (error 1227 without it).
-- step: modified_mariadb
SELECT MODIFIED_COUNTER
FROM information_schema.INNODB_SYS_TABLESTATS
WHERE NAME = CONCAT(COALESCE(%(schema)s, DATABASE()), '/', %(table)s);
-- step: modified_mysql
SELECT MODIFIED_COUNTER
FROM information_schema.INNODB_TABLESTATS
WHERE NAME = CONCAT(COALESCE(%(schema)s, DATABASE()), '/', %(table)s);
-- step: live_rows_mysql
-- Without PROCESS, the estimated row count stands in. MySQL 8 answers it
-- from a copy it refreshes once a day by default; 0 asks InnoDB each time.
SET SESSION information_schema_stats_expiry = 0;
-- step: rows
-- InnoDB's estimate of the table's rows: set by each calculation of the
-- statistics, then moved by every insert and delete.
SELECT TABLE_ROWS
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = COALESCE(%(schema)s, DATABASE()) AND TABLE_NAME = %(table)s
-- step: partition_rows
-- The same of one partition (the hot one of a partitioned table).
SELECT TABLE_ROWS
FROM information_schema.PARTITIONS
WHERE TABLE_SCHEMA = COALESCE(%(schema)s, DATABASE()) AND TABLE_NAME = %(table)s
  AND PARTITION_NAME = %(partition)s

-- name: analyze
-- InnoDB's persistent statistics of the queue table, from a sample of each
-- index's pages (innodb_stats_persistent_sample_pages, 20 by default). While
-- it runs the table is read and written as usual (MariaDB 10.5+ and MySQL
-- 8.0.24+ no longer flush it from the table cache; on an earlier MySQL the
-- service never runs it: db/mysql/statistics.py). NO_WRITE_TO_BINLOG: the
-- statistics are this server's own; replicas keep theirs.
-- step: mariadb
-- use_stat_tables: where the server is set to collect MariaDB's
-- engine-independent statistics on every ANALYZE, that reads the whole table;
-- this one collects InnoDB's alone.
SET STATEMENT use_stat_tables = 'NEVER' FOR
ANALYZE NO_WRITE_TO_BINLOG TABLE {queue_table};
-- step: mysql
ANALYZE NO_WRITE_TO_BINLOG TABLE {queue_table}
-- step: mariadb_partition
-- A partitioned table's hot partition alone (the day partitions never change
-- once their day is over).
SET STATEMENT use_stat_tables = 'NEVER' FOR
ALTER TABLE {queue_table} ANALYZE PARTITION p_hot;
-- step: mysql_partition
ALTER TABLE {queue_table} ANALYZE PARTITION p_hot

-- name: retention
-- A partitioned table's retention (db/mysql/retention.py): whole weeks added
-- ahead and dropped once expired, where the plain table's purge deletes rows.
-- step: today
-- The UTC day, as days since 1970-01-01 (the key of the partition it fills).
SELECT UNIX_TIMESTAMP() DIV 86400;
-- step: days
-- The history partitions (p<first day>, VALUES LESS THAN (<the day after its
-- last>)) in order, and their rows, as InnoDB estimates them.
SELECT PARTITION_NAME, PARTITION_DESCRIPTION, TABLE_ROWS
FROM information_schema.PARTITIONS
WHERE TABLE_SCHEMA = COALESCE(%(schema)s, DATABASE()) AND TABLE_NAME = %(table)s
  AND PARTITION_NAME <> 'p_hot'
ORDER BY PARTITION_ORDINAL_POSITION;
-- step: lock_wait
-- ADD and DROP PARTITION take an exclusive metadata lock, which waits for
-- every open transaction that touched the table (a running handler's, say)
-- while the statements behind it wait too: each gives up quickly and is tried
-- again (the session's own value is put back afterwards).
SET SESSION lock_wait_timeout = %(seconds)s;
-- step: lock_wait_of_session
SELECT @@SESSION.lock_wait_timeout;
-- step: keep_payloads
-- Later attempts still waiting whose first attempt ended in the partition
-- about to be dropped (its days: low to bound - 1) get its payload: they read
-- it from the first attempt.
UPDATE {queue_table} AS a
JOIN {queue_table} AS f
  ON f.id = a.id_inicial AND f.finished_day >= %(low)s AND f.finished_day < %(bound)s
SET a.payload = f.payload
WHERE a.finished_day = 1 AND a.payload IS NULL;
-- step: add
ALTER TABLE {queue_table} ADD PARTITION;
-- step: drop
ALTER TABLE {queue_table} DROP PARTITION
