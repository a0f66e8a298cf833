-- Named queries of the SingleStore dialect (PyMySQL, %(name)s and %s
-- parameters; a list parameter is sent as a parenthesized list).
-- {queue_table} and {subscriber_table} are validated identifiers; every
-- value is a bound parameter.
--
-- SingleStore has no SKIP LOCKED, no named locks (GET_LOCK), no RETURNING
-- and no consecutive AUTO_INCREMENT values. Claims are conditional updates
-- (the row count tells who won); liveness and maintenance locks come from
-- the socket server; inserts are one row per statement. An operation of
-- several statements lists them as "-- step: <name>" sections, run in order.
--
-- NOW(6) is the statement's start time in the cluster's time zone.
--
-- base: mysql
-- Queries equal to MySQL's are inherited from mysql/queries.sql; only
-- those that differ are written here.

-- name: insert_task
-- One row per statement (the store appends the VALUES row); the id is
-- LAST_INSERT_ID(). An absent data_hora is DEFAULT.
-- step: head
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial
) VALUES

-- name: insert_tasks
-- SingleStore's AUTO_INCREMENT values are unique but not consecutive: the
-- store runs one INSERT per task, in the caller's order, reading each id.
-- step: head
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial
) VALUES

-- name: claim_tasks
-- No SKIP LOCKED: read candidates in claim order without locking, then win
-- one with a conditional update in the claim's transaction: the row count
-- tells whether this worker won it. The runtime takes the task's liveness
-- lock from the socket server before that transaction commits.
-- step: candidates
SELECT {task_columns}
FROM {queue_table} AS t
WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
ORDER BY t.prioridade DESC, t.data_hora, t.id
LIMIT %(limit)s;
-- step: mark
UPDATE {queue_table}
SET status = 'processando'
WHERE id = %(id)s AND status = 'pendente';
-- step: first_payloads
-- Later attempts keep no payload of their own: it comes from the first attempt.
SELECT id, payload
FROM {queue_table}
WHERE id IN %(ids)s

-- name: find_orphans
-- 'processando' rows; the store keeps those whose liveness lock nobody holds
-- on the socket server. Without row locks to skip, settling them relies on
-- the conditional updates of fail_and_retry / fail_and_bury / fail_final.
-- step: select
SELECT t.id
FROM {queue_table} AS t
WHERE t.status = 'processando'
ORDER BY t.data_hora, t.id
LIMIT %(limit)s;
-- step: rows
SELECT {task_columns_resolved}
FROM {queue_table} AS t
LEFT JOIN {queue_table} AS first_attempt
       ON first_attempt.id = t.id_inicial AND t.payload IS NULL
WHERE t.id IN %(ids)s
ORDER BY t.id

-- name: promote_due
-- Retries and scheduled rows whose time has come become 'pendente'
-- (conditional: a row changed meanwhile is left alone).
-- step: select
SELECT id
FROM {queue_table}
WHERE status = 'agendada' AND data_hora <= NOW(6)
ORDER BY data_hora, id
LIMIT %(limit)s;
-- step: mark
UPDATE {queue_table}
SET status = 'pendente'
WHERE id IN %(ids)s AND status = 'agendada'

-- name: purge
-- One bounded round: old rows that are settled, never a first attempt whose
-- later attempts still need its payload. The ids are read first and deleted
-- by id, status checked again.
-- step: select
SELECT o.id
FROM {queue_table} AS o
WHERE o.data_hora < NOW(6) - INTERVAL %(max_age_days)s DAY
  AND o.status NOT IN ('pendente', 'agendada', 'processando')
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

-- name: queue_oid
-- SingleStore has no oid: the store derives a stable number from the qualified
-- table name; this only checks that the table exists.
SELECT count(*)
FROM information_schema.tables
WHERE table_schema = COALESCE(%(schema)s, DATABASE()) AND table_name = %(table)s

-- name: insert_deliveries
-- One task per subscriber of a publication, in the publication's transaction;
-- one INSERT per delivery (as insert_tasks).
-- step: head
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, tenant, grupo_empresarial, prioridade,
    publication_id, subscriber_id, payload, payload_hash
) VALUES
