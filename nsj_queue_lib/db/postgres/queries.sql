-- Named queries of the PostgreSQL dialect.
-- {queue_table} and {subscriber_table} are validated identifiers; every
-- value is a bound parameter.

-- name: insert_task
-- The first attempt's data_hora and data_hora_inicial are the same instant.
-- status: NULL ('pendente'), or 'aguardando' for a child written waiting for its
-- parents by its INSERT (one row version instead of two: workflow/dependencies.py).
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial, status
)
SELECT
    %(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(payload)s, %(payload_hash)s,
    %(tenant)s, %(grupo_empresarial)s, %(pub_sub)s, coalesce(%(prioridade)s::integer, 50),
    due.at, due.at, coalesce(%(status)s::varchar, 'pendente')
FROM (SELECT coalesce(%(data_hora)s::timestamptz, clock_timestamp()) AS at) AS due
RETURNING id

-- name: insert_task_keyed
-- insert_task with a dedupe_key, a lock_key, a trace context, overrides
-- (max_retry, timeout_s, next_try_priority: docs/fleet-control.md) or a fair_key
-- (fleet/fair.py): no row when an
-- unfinished task holds the dedupe_key (after waiting for the transaction that
-- is inserting it, if any). Plain inserts name none of these columns, so that a
-- client keeps working on a table db_gen --upgrade has not reached yet. No
-- conflict target: the unique index of unfinished dedupe keys is (dedupe_key)
-- on a plain table and (dedupe_key, finished_day) on a partitioned one (a
-- partitioned table's unique indexes hold its partition key), and a new task
-- can conflict with no other unique index (the primary key's ids come from the
-- sequence; the running lock keys' holds running tasks only).
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash, tenant,
    grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial, dedupe_key, lock_key,
    trace_context, max_retry, timeout_s, next_try_priority, fair_key, status
)
SELECT
    %(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(payload)s, %(payload_hash)s,
    %(tenant)s, %(grupo_empresarial)s, %(pub_sub)s, due.prioridade,
    -- A task with a fair_key and no data_hora is stamped with its turn (fleet/fair.py):
    -- a microsecond after its key's last ready task of its prioridade, and never before
    -- the first ready task of that prioridade (a key with no backlog joins the current
    -- round), nor after now (it is ready at once). data_hora_inicial stays the real time.
    CASE WHEN %(fair_key)s::varchar IS NULL OR %(data_hora)s::timestamptz IS NOT NULL THEN due.at
         ELSE least(due.at, greatest(
             (SELECT max(k.data_hora) FROM {queue_table} AS k
              WHERE k.fair_key = %(fair_key)s::varchar AND k.prioridade = due.prioridade
                AND k.status = 'pendente' AND k.data_hora <= due.at) + interval '1 microsecond',
             (SELECT min(h.data_hora) FROM {queue_table} AS h
              WHERE h.status = 'pendente' AND h.prioridade = due.prioridade)))
    END,
    due.at, %(dedupe_key)s, %(lock_key)s, %(trace_context)s,
    %(max_retry)s::integer, %(timeout_s)s::float8, %(next_try_priority)s::integer,
    %(fair_key)s::varchar, coalesce(%(status)s::varchar, 'pendente')
FROM (SELECT coalesce(%(data_hora)s::timestamptz, clock_timestamp()) AS at,
             coalesce(%(prioridade)s::integer, 50) AS prioridade) AS due
ON CONFLICT DO NOTHING
RETURNING id

-- name: dedupe_holder
-- The unfinished task holding a dedupe_key (the partial unique index).
SELECT coalesce(id_inicial, id)
FROM {queue_table}
WHERE dedupe_key = %(dedupe_key)s AND status IN ('pendente', 'agendada', 'processando')

-- name: insert_tasks
-- One round trip for many tasks; WITH ORDINALITY keeps the caller's order.
-- The trace_column and trace_value placeholders are empty but in the store's
-- traced rendering (client_store.py: one trace context for every task of the call).
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial{trace_column}
)
SELECT
    r.origem, r.destino, r.processo, r.chave_externa, r.payload, r.payload_hash,
    r.tenant, r.grupo_empresarial, r.pub_sub, coalesce(r.prioridade, 50),
    due.at, due.at{trace_value}
FROM unnest(
    %(origem)s::varchar[], %(destino)s::varchar[], %(processo)s::varchar[],
    %(chave_externa)s::varchar[], %(payload)s::text[], %(payload_hash)s::bytea[],
    %(tenant)s::bigint[], %(grupo_empresarial)s::varchar[], %(pub_sub)s::boolean[],
    %(prioridade)s::integer[], %(data_hora)s::timestamptz[]
) WITH ORDINALITY AS r(
    origem, destino, processo, chave_externa, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, prioridade, data_hora, ord
)
CROSS JOIN LATERAL (SELECT coalesce(r.data_hora, clock_timestamp()) AS at) AS due
ORDER BY r.ord
RETURNING id

-- name: list_equivalent
SELECT {task_columns}
FROM {queue_table} AS t
-- The key as = or IS NULL, not IS NOT DISTINCT FROM: PostgreSQL cannot use an
-- index for IS NOT DISTINCT FROM, and this is what idx_equivalent is for.
WHERE (t.chave_externa = %(chave_externa)s
       OR (%(chave_externa)s::varchar IS NULL AND t.chave_externa IS NULL))
  AND t.payload_hash IS NOT DISTINCT FROM %(payload_hash)s
  AND t.status = ANY(%(statuses)s)
ORDER BY t.id

-- name: get_task
SELECT {task_columns_resolved}
FROM {queue_table} AS t
LEFT JOIN {queue_table} AS first_attempt
       ON first_attempt.id = t.id_inicial AND t.payload IS NULL
WHERE t.id = %(id)s

-- name: claim_settings
-- For the claim of a worker whose liveness locks live in the socket server
-- (the claim function sets the same for its own statements). The claim must
-- walk the partial index in claim order and stop at LIMIT: right after a
-- burst of inserts the table's statistics are stale and the planner would
-- otherwise sort every ready row. JIT is off: a claim is always tiny,
-- compiling it costs far more than it saves. This claim commits
-- asynchronously: losing it in a server crash only returns the task to the
-- queue, and the task's own synchronous commit flushes it.
SELECT set_config('synchronous_commit', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('jit', 'off', true)

-- name: claim_uncommitted
-- The next ready row in claim order, locked without waiting on rows another
-- worker is claiming, marked 'processando' in the same statement; the caller
-- takes its liveness lock on the socket server before this transaction
-- commits. Later attempts keep no payload of their own: it comes from the
-- first attempt. The last column stands where the claim function returns
-- whether it took the lock.
WITH next AS (
    SELECT t.id
    FROM {queue_table} AS t
    WHERE {hot_t}t.status = 'pendente' AND t.data_hora <= clock_timestamp() AND {lock_key_free}
      AND {deliverable}
      AND {limits_free}
    ORDER BY t.prioridade DESC, t.data_hora, t.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE {queue_table} AS t
    SET status = 'processando', started_at = clock_timestamp(), worker = %(worker)s
    FROM next
    WHERE {hot_t}t.id = next.id
    RETURNING t.*
)
SELECT {claimed_columns_resolved}, false AS liveness_locked
FROM claimed AS t
LEFT JOIN {queue_table} AS first_attempt
       ON first_attempt.id = t.id_inicial AND t.payload IS NULL

-- name: next_due
-- Seconds until the next waiting row becomes ready (or a pause ends), by the database's clock
-- (NULL when none is waiting). A retry ('agendada') already due gives a
-- negative number: it must be promoted now. Each MIN reads one index entry:
-- the instant is a sub-select (computed once, before the scan), because
-- clock_timestamp() itself is volatile and cannot bound an index scan; written
-- inline it made the planner read every ready row (58 ms on a backlog of
-- 50,000, after every wake-up).
SELECT extract(epoch FROM least(
    (SELECT min(data_hora) FROM {queue_table} WHERE {hot}status = 'agendada'),
    (SELECT min(data_hora) FROM {queue_table}
      WHERE {hot}status = 'pendente' AND data_hora > (SELECT clock_timestamp())),
    -- The end of a pause with until= (db/pause_conditions.py): its tasks become claimable
    -- then, with no insert to wake the workers.
    (SELECT min(paused_until) FROM {limits_table}
      WHERE paused AND paused_until > (SELECT clock_timestamp())),
    -- ... and of an open circuit breaker's cool-down (fleet/breakers.py).
    (SELECT min(breaker_until) FROM {limits_table}
      WHERE breaker_open AND breaker_until > (SELECT clock_timestamp()))
) - clock_timestamp())::float8 AS seconds

-- name: unlock_task
SELECT pg_advisory_unlock(%(queue_key)s, %(task_key)s)

-- name: fail_and_retry
-- Ends a 'processando' attempt as failed and inserts the next attempt, due
-- at the failure time plus the back-off (attempt_step 0: with the same
-- tentativa, a held attempt that used none of max_retry). Nothing happens when the row is no
-- longer 'processando' (another worker already settled it).
WITH failed AS (
    UPDATE {queue_table}
    SET status = %(status)s,
        mensagem = %(mensagem)s,
        reenfileirado = true,
        proxima_tentativa = clock_timestamp() + make_interval(secs => %(delay_seconds)s),
        finished_at = clock_timestamp()
    WHERE {hot}id = %(id)s AND status = 'processando'
    RETURNING *
)
INSERT INTO {queue_table} (
    id_inicial, data_hora_inicial, data_hora, origem, destino, processo, chave_externa,
    tentativa, status, id_anterior, data_hora_anterior, status_anterior, mensagem_anterior,
    tenant, grupo_empresarial, payload_hash, pub_sub, publication_id, subscriber_id,
    dead, live_id, prioridade, dedupe_key, lock_key, trace_context,
    max_retry, timeout_s, next_try_priority, fair_key, payload
)
SELECT
    coalesce(f.id_inicial, f.id), f.data_hora_inicial, f.proxima_tentativa, f.origem, f.destino,
    f.processo, f.chave_externa, f.tentativa + %(attempt_step)s, 'agendada', f.id, f.data_hora, f.status,
    f.mensagem, f.tenant, f.grupo_empresarial, f.payload_hash, f.pub_sub, f.publication_id,
    f.subscriber_id, f.dead, f.live_id,
    -- The retry's prioridade: the task's next_try_priority when it was given one.
    coalesce(f.next_try_priority, f.prioridade), f.dedupe_key,
    f.lock_key, f.trace_context, f.max_retry, f.timeout_s, f.next_try_priority, f.fair_key,
    -- A later attempt holds a payload only when the partitioned layout's retention copied
    -- the first attempt's before dropping its day: the next attempt keeps it too.
    CASE WHEN f.id_inicial IS NOT NULL THEN f.payload END
FROM failed AS f
RETURNING id

-- name: fail_and_bury
-- The last attempt failed: mark the overflow and enqueue the dead-letter task
-- (a first attempt: data_hora and data_hora_inicial are one instant, which two
-- clock_timestamp() column defaults would not be).
WITH failed AS (
    UPDATE {queue_table}
    SET status = %(status)s, mensagem = %(mensagem)s, estouro_tentativas = true,
        finished_at = clock_timestamp()
    WHERE {hot}id = %(id)s AND status = 'processando'
    RETURNING *
)
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, tentativa, status, payload, payload_hash,
    tenant, grupo_empresarial, pub_sub, publication_id, subscriber_id, dead, live_id, prioridade,
    data_hora, data_hora_inicial, trace_context
)
SELECT
    f.origem, f.destino, f.processo, f.chave_externa, 1, 'pendente', %(payload)s, f.payload_hash,
    f.tenant, f.grupo_empresarial, f.pub_sub, f.publication_id, f.subscriber_id, true,
    coalesce(f.id_inicial, f.id), f.prioridade, due.at, due.at, f.trace_context
FROM failed AS f
CROSS JOIN LATERAL (SELECT clock_timestamp() AS at) AS due
RETURNING id

-- name: fail_final
-- A dead-letter task ran out of attempts: nothing further is enqueued.
UPDATE {queue_table}
SET status = %(status)s, mensagem = %(mensagem)s, estouro_tentativas = true,
    finished_at = clock_timestamp()
WHERE {hot}id = %(id)s AND status = 'processando'
RETURNING id

-- name: release_task
-- Gives a claimed task that never started back to the queue (as unstarted).
UPDATE {queue_table}
SET status = 'pendente', started_at = NULL, worker = NULL
WHERE {hot}id = %(id)s AND status = 'processando'

-- name: try_service_lock
SELECT pg_try_advisory_lock(%(key)s)

-- name: service_unlock
SELECT pg_advisory_unlock(%(key)s)

-- name: find_orphans
-- 'processando' rows with no live worker: no liveness lock is held for them
-- and no transaction holds their row. The row locks taken here make a
-- worker that is just starting the task wait and then see the new status.
SELECT {claimed_columns_resolved}
FROM {queue_table} AS t
LEFT JOIN {queue_table} AS first_attempt
       ON first_attempt.id = t.id_inicial AND t.payload IS NULL
WHERE {hot_t}t.status = 'processando'
  -- In client/server mode the liveness locks live in the socket server: the
  -- caller asks it which of these rows are still held.
  AND (NOT %(check_db_locks)s::boolean OR NOT EXISTS (
      SELECT 1 FROM pg_locks AS l
      WHERE l.locktype = 'advisory'
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND l.classid = %(queue_oid)s::bigint::oid
        AND l.objid = (t.id %% 2147483648)::bigint::oid
        AND l.objsubid = 2
        AND l.granted
        -- A live executor holds its task's lock only inside an open transaction
        -- (the claim's COMMIT AND CHAIN to the settling commit). A holder outside
        -- any transaction is a lock left behind on a pooler's server connection
        -- (a commit that failed behind a pooler in transaction mode): not alive.
        -- A state this user may not read (NULL) counts as alive.
        AND NOT EXISTS (
            SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = l.pid AND a.state = 'idle'
        )
  ))
ORDER BY t.id
LIMIT %(limit)s
FOR UPDATE OF t SKIP LOCKED

-- name: promote_due
-- Retries and scheduled rows whose time has come become 'pendente'.
UPDATE {queue_table}
SET status = 'pendente'
WHERE {hot}id IN (
    SELECT id FROM {queue_table}
    WHERE {hot}status = 'agendada' AND data_hora <= clock_timestamp()
    ORDER BY data_hora
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)

-- name: count_stale_pending
-- The oldest ready row, if it has waited too long: one index entry (the
-- sub-select bounds the scan, as in next_due; the ORDER BY walks the due index
-- from its oldest entry instead of every ready row of the claim index).
SELECT count(*) FROM (
    SELECT 1 FROM {queue_table}
    WHERE {hot}status = 'pendente'
      AND data_hora <= (SELECT clock_timestamp() - make_interval(secs => %(wait_seconds)s))
    ORDER BY data_hora
    LIMIT 1
) AS stale

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: purge
-- One bounded round: old rows that are settled, never a first attempt whose
-- later attempts still need its payload; the tasks of the rows deleted (their
-- side rows go in the same transaction, db/side_store.py). The cutoff is statement_timestamp()'s
-- (stable): clock_timestamp() is volatile, so it could not bound the purge
-- index's scan, and the round that finds nothing left to delete read every
-- settled row of the table (7-9 s at 10M rows, benchmarks/bench_history.py).
WITH doomed AS (
    SELECT o.id
    FROM {queue_table} AS o
    WHERE o.data_hora < statement_timestamp() - make_interval(days => %(max_age_days)s)
      AND o.status NOT IN ('pendente', 'agendada', 'processando')
      AND o.status <> 'aguardando'
      AND NOT EXISTS (
          SELECT 1 FROM {queue_table} AS a
          WHERE a.id_inicial = coalesce(o.id_inicial, o.id)
            AND a.status IN ('pendente', 'agendada', 'processando')
      )
    ORDER BY o.data_hora
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
)
DELETE FROM {queue_table} AS t
USING doomed
WHERE t.id = doomed.id
RETURNING coalesce(t.id_inicial, t.id)

-- name: queue_oid
-- And whether it is partitioned (db/postgres/layout.py), and its comment: a table
-- migrated to that layout keeps its old oid there as its locks' key (migration.py).
SELECT c.oid::bigint, c.relkind = 'p', obj_description(c.oid, 'pg_class')
FROM pg_class AS c WHERE c.oid = %(table)s::regclass

-- name: insert_deliveries
-- One task per subscriber of a publication, in the publication's transaction;
-- each a first attempt whose data_hora and data_hora_inicial are one instant.
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, tenant, grupo_empresarial, prioridade,
    publication_id, subscriber_id, payload, payload_hash, data_hora, data_hora_inicial,
    trace_context
)
SELECT
    %(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(tenant)s, %(grupo_empresarial)s,
    coalesce(%(prioridade)s::integer, 50), %(publication_id)s, d.subscriber_id, d.payload, d.payload_hash,
    due.at, due.at, %(trace_context)s
FROM unnest(%(subscriber_ids)s::varchar[], %(payloads)s::text[], %(payload_hashes)s::bytea[])
     WITH ORDINALITY AS d(subscriber_id, payload, payload_hash, ord)
CROSS JOIN LATERAL (SELECT clock_timestamp() AS at) AS due
ORDER BY d.ord
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
WITH task AS (
    SELECT coalesce(id_inicial, id) AS first_id FROM {queue_table} WHERE id = %(id)s
)
SELECT {task_view_columns}
FROM {queue_table} AS t, task
WHERE t.id = coalesce(
    (SELECT max(a.id) FROM {queue_table} AS a WHERE a.id_inicial = task.first_id),
    task.first_id
)

-- name: cancel_attempt
-- A waiting attempt becomes 'cancelada'; a running one keeps running with its
-- cancel request recorded (its worker is told after commit). mensagem and
-- finished_at are assigned before status: MySQL evaluates SET left to right, and the dialects
-- keep one shape. Nothing happens to a finished attempt.
UPDATE {queue_table} AS t
SET mensagem = CASE WHEN t.status = 'processando' THEN t.mensagem ELSE %(mensagem)s END,
    finished_at = CASE WHEN t.status = 'processando' THEN t.finished_at ELSE clock_timestamp() END,
    status = CASE WHEN t.status = 'processando' THEN t.status ELSE 'cancelada' END,
    cancel_requested = true
WHERE t.id = %(id)s AND t.status IN ('pendente', 'agendada', 'processando', 'aguardando')
RETURNING t.status

-- name: cancel_running
-- The handler stopped on a cancel request (it raised TaskCancelled).
UPDATE {queue_table}
SET status = 'cancelada', mensagem = %(mensagem)s, finished_at = clock_timestamp()
WHERE {hot}id = %(id)s AND status = 'processando'
RETURNING id

-- name: cancel_if_requested
-- A failed or abandoned attempt whose cancel was requested ends 'cancelada'
-- instead of being retried. The row is locked either way, so a cancel_attempt
-- running meanwhile waits and then finds the attempt settled.
WITH running AS (
    SELECT id, cancel_requested
    FROM {queue_table}
    WHERE {hot}id = %(id)s AND status = 'processando'
    FOR UPDATE
)
UPDATE {queue_table} AS t
SET status = 'cancelada', mensagem = %(mensagem)s, finished_at = clock_timestamp()
FROM running
WHERE {hot_t}t.id = running.id AND running.cancel_requested
RETURNING t.id

-- name: cancel_requests
-- Which of a worker's running attempts have a cancel request (its safety poll).
SELECT id
FROM {queue_table}
WHERE {hot}id = ANY(%(ids)s::bigint[]) AND status = 'processando' AND cancel_requested

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
INSERT INTO {workers_table} AS w (worker, processos)
VALUES (%(worker)s, %(processos)s)
ON CONFLICT (worker) DO UPDATE
SET processos = EXCLUDED.processos, seen_at = clock_timestamp()

-- name: worker_left
-- A worker that stops removes its row.
DELETE FROM {workers_table} WHERE worker = %(worker)s

-- name: table_health
-- The queue table's dead row versions and rows changed since its last ANALYZE
-- (the cumulative statistics, a second or so behind), and whether this session
-- may VACUUM it: its owner's privileges (a superuser has them all).
SELECT s.n_dead_tup AS dead_rows, s.n_mod_since_analyze AS changed_since_analyze,
       pg_has_role(c.relowner, 'USAGE') AS may_maintain
FROM pg_class AS c
JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = to_regclass(%(table)s)

-- name: hot_space
-- The hot partition's size with its indexes, the bytes of its live rows (the tuple
-- header and the columns' average widths, from the ANALYZE the vacuum just ran), and
-- the dead versions that vacuum had to leave.
SELECT pg_total_relation_size(c.oid) AS size_bytes,
       (greatest(c.reltuples, 0) * (24 + coalesce(
           (SELECT sum(st.avg_width) FROM pg_stats AS st
            WHERE st.schemaname = n.nspname AND st.tablename = c.relname), 0)))::bigint
           AS live_bytes,
       coalesce(s.n_dead_tup, 0) AS dead_rows
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = to_regclass(%(table)s)

-- name: vacuum
-- SKIP_LOCKED: another vacuum (autovacuum's) at work on the table is left to it.
VACUUM (ANALYZE, SKIP_LOCKED) {queue_table}

-- name: analyze
-- (SKIP_LOCKED: an ANALYZE already at work on the table is left to it.)
ANALYZE (SKIP_LOCKED) {queue_table}
