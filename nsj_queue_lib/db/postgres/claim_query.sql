-- The claim function's claim (claim_function.sql): up to claim_limit ready rows
-- in claim order ({limit}: fewer when an earlier claim of the call took some),
-- 'processando', their liveness locks taken. The window condition bounds the
-- walk of the claim index (dialect.py).
-- lock_key: the unique index of running keys refuses a second running task of
-- a key that this statement's snapshot saw free (another claim committed one
-- since, docs/flow-control.md). The row is not this claim's to take: the
-- function claims again, with a snapshot that sees the key busy. The liveness
-- locks are output columns after the ORDER BY, evaluated after the sort
-- (volatile), so after every row's UPDATE: a refused claim has taken no lock
-- and returned no row. started_at and worker say when and where the attempt
-- started (worker_name: the claiming worker's, as in its workers table row).
-- A retry's payload is its first attempt's: joined here on the plain layout,
-- read by the function apart on the partitioned one (db/postgres/dialect.py).
-- One write per task (QUEUE_ONE_WRITE, docs/internals/one-write.md): in a held
-- claim (hold) a row without a lock key or a timeout of its own is returned
-- as locked, 'pendente', not written; the group's transaction that runs its
-- handler writes its outcome, the only new version of the row. A keyed row is
-- still written: its key's unique index of running keys needs the entry.
WITH next AS (
    SELECT q.id, q AS locked_row, hold AND q.lock_key IS NULL AND q.timeout_s IS NULL AS held
    FROM {table} AS q
    WHERE {hot_q}q.status = 'pendente' AND q.data_hora <= clock_timestamp()
      AND {window}
      -- lock_key: not while its key is busy (nsj_queue_lib/flow/lock_keys.py; the running
      -- keys read once per claim as a hashed set, db/postgres/claim_sets.py).
      AND {lock_key_free}
      -- Deliveries of subscribers the worker handles only (nsj_queue_lib/flow/deliveries.py).
      AND {deliverable}
      -- limited processos: only the limited claim takes them (flow/limits.py; read once
      -- per claim as a hashed set, db/postgres/claim_sets.py).
      AND {limits_free}
    ORDER BY q.prioridade DESC, q.data_hora, q.id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
), written AS (
    UPDATE {table} AS t
    SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
    FROM next
    WHERE {hot_t}t.id = next.id AND NOT next.held
    RETURNING t AS claimed_row, t.id AS claimed_id, t.id_inicial AS chain_id,
              t.payload IS NULL AS needs_payload, t.prioridade AS claimed_prioridade,
              t.data_hora AS claimed_data_hora
), claimed AS (
    SELECT * FROM written
    UNION ALL
    SELECT n.locked_row, (n.locked_row).id, (n.locked_row).id_inicial,
           (n.locked_row).payload IS NULL, (n.locked_row).prioridade, (n.locked_row).data_hora
    FROM next AS n
    WHERE n.held
)
SELECT c.claimed_row, {first_payload},
       pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4) AS claimed_lock
FROM claimed AS c{first_payload_join}
ORDER BY c.claimed_prioridade DESC, c.claimed_data_hora, c.claimed_id
