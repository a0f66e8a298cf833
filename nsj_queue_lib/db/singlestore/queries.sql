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
-- those that differ are written here. Inserts use only the inherited
-- queries' "head" step: the store sends one row per INSERT and reads each id.

-- name: claim_tasks
-- No SKIP LOCKED: read candidates in claim order without locking, then win
-- one with a conditional update in the claim's transaction: the row count
-- tells whether this worker won it. The runtime takes the task's liveness
-- lock from the socket server before that transaction commits.
-- step: candidates
SELECT {claimed_columns}
FROM {queue_table} AS t
WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
ORDER BY t.prioridade DESC, t.data_hora, t.id
LIMIT %(limit)s;
-- step: mark
UPDATE {queue_table}
SET status = 'processando', started_at = NOW(6), worker = %(worker)s
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
SELECT {claimed_columns_resolved}
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
