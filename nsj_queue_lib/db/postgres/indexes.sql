-- The claim: ready rows in claim order (higher priority first, then older).
-- Partial, so its size follows the ready backlog, not the table's history.
CREATE INDEX IF NOT EXISTS {idx_claim} ON {table} (prioridade DESC, data_hora, id) WHERE status = 'pendente';
-- Rows waiting for their time: renotify scans and the dispatcher's next wake-up.
CREATE INDEX IF NOT EXISTS {idx_due} ON {table} (data_hora) WHERE status IN ('pendente', 'agendada');
-- The earliest retry waiting for its time (the dispatcher's next wake-up, promotions).
CREATE INDEX IF NOT EXISTS {idx_scheduled} ON {table} (data_hora) WHERE status = 'agendada';
-- The retry service looks only at rows being processed.
CREATE INDEX IF NOT EXISTS {idx_running} ON {table} (id) WHERE status = 'processando';
-- Purge: oldest settled rows first. Partial (the purge's own condition), so
-- enqueuing and claiming a task add no entry here; only settling does.
CREATE INDEX IF NOT EXISTS {idx_data_hora} ON {table} (data_hora) WHERE status NOT IN ('pendente', 'agendada', 'processando');
-- Purge keeps a task's first attempt while a later attempt still needs its
-- payload. Only later attempts have id_inicial, so first attempts (nearly
-- every row) never enter this index.
CREATE INDEX IF NOT EXISTS {idx_chain} ON {table} (id_inicial) WHERE id_inicial IS NOT NULL AND status IN ('pendente', 'agendada', 'processando');
-- A task's latest attempt (QueueClient.get_task, cancel_task): later attempts only.
CREATE INDEX IF NOT EXISTS {idx_attempts} ON {table} (id_inicial) WHERE id_inicial IS NOT NULL;
-- QueueClient.list_equivalent_task (and 1.2.2's): the rows of one chave_externa,
-- whose payload_hash and status are checked on the row. Only the key: every claim
-- and every settle adds an entry to each full index (the status change rules out
-- HOT updates), and with payload_hash (64 bytes of hex) and status this index was
-- larger than the table itself; on a backlog of 50,000 that made each claimed
-- task's index upkeep about a tenth dearer than on 5,000 (docs/benchmarks.md).
CREATE INDEX IF NOT EXISTS {idx_equivalent} ON {table} (chave_externa);
-- dedupe_key: at most one unfinished task per key (QueueClient's dedupe_key=); a
-- finished task (sucesso, cancelada, an exhausted failure) leaves the index.
CREATE UNIQUE INDEX IF NOT EXISTS {idx_dedupe} ON {table} (dedupe_key{with_day}) WHERE dedupe_key IS NOT NULL AND status IN ('pendente', 'agendada', 'processando');
-- lock_key: the claim's two probes of a keyed candidate: the first ready task
-- of its key in claim order, and whether a task of its key is running. The
-- second is unique: two claims whose snapshots both saw the key free cannot
-- both commit a running task of it (the later one skips the row).
CREATE INDEX IF NOT EXISTS {idx_lock_key} ON {table} (lock_key, prioridade DESC, data_hora, id) WHERE lock_key IS NOT NULL AND status = 'pendente';
CREATE UNIQUE INDEX IF NOT EXISTS {idx_lock_key_running} ON {table} (lock_key{with_day}) WHERE lock_key IS NOT NULL AND status = 'processando';
-- Tasks waiting for their parents (docs/how-to/dependencies.md): what nsjq status counts
-- of them (db/tally.py) without reading the history.
CREATE INDEX IF NOT EXISTS {idx_aguardando} ON {table} (id) WHERE status = 'aguardando';
-- Per-processo limits: the limited claim's look at the ready and running
-- tasks of one processo (docs/flow-control.md).
CREATE INDEX IF NOT EXISTS {idx_processo} ON {table} (processo, status) WHERE status IN ('pendente', 'processando');
-- fair_key: the enqueue's look-up of a key's last ready task of one prioridade, whose
-- data_hora the key's next task follows (fleet/fair.py). Unkeyed tasks never enter it.
CREATE INDEX IF NOT EXISTS {idx_fair_key} ON {table} (fair_key, prioridade, data_hora) WHERE fair_key IS NOT NULL AND status = 'pendente';
