-- MySQL has no partial indexes: status leads every index the workers' claims
-- and scans use, so each reads only the rows of the status it looks for.
-- The claim: ready rows in claim order (higher priority first, then older),
-- read in index order up to the LIMIT, without sorting.
CREATE INDEX {idx_claim} ON {table} (status, prioridade DESC, data_hora, id);
-- Rows of one status by time: the next wake-up, due retries, waiting tasks,
-- and the retry service's scan of running rows.
CREATE INDEX {idx_due} ON {table} (status, data_hora);
-- Purge: oldest rows first.
CREATE INDEX {idx_data_hora} ON {table} (data_hora);
-- Purge keeps a first attempt while a later attempt still needs its payload.
-- No status here nor in the next index: a task changes status twice (claim,
-- outcome), and InnoDB rewrites every index holding it (a delete-mark and an
-- insert each); the few rows of one chain, or of one key and payload, are
-- read and their status checked on the row instead.
CREATE INDEX {idx_chain} ON {table} (id_inicial);
-- QueueClient.list_equivalent_task.
CREATE INDEX {idx_equivalent} ON {table} (chave_externa, payload_hash);
-- The two unique indexes below are descending, so that their NULL entries come last.
-- InnoDB checks a new key against a unique index with next-key locks, and past a
-- delete-marked entry of the same key (a finished task's, until purge removes it) it
-- also locks the gap before that entry and the record after it, until the commit. In
-- ascending order every new task's NULL entry (its id the greatest) goes into the gap
-- just before the smallest key: a caller's open transaction that enqueued a task of that
-- dedupe key (or a claim of that lock key, until its commit) held up every enqueue of the
-- queue. Descending, new NULL entries go to the index's end, away from every key
-- (MariaDB 10.8+ and MySQL 8 keep the order; 10.6 ignores DESC).
-- dedupe_key: at most one unfinished task per key (dedupe_active is NULL once finished).
CREATE UNIQUE INDEX {idx_dedupe} ON {table} (dedupe_active DESC{with_day});
-- lock_key: the claim's two probes of a keyed candidate: the first ready task
-- of its key in claim order, and whether a task of its key is running. The
-- status is lock_key_status, NULL on unkeyed rows: their index entries never
-- change, where status would cost each unkeyed task two index rewrites.
CREATE INDEX {idx_lock_key} ON {table} (lock_key, lock_key_status, prioridade DESC, data_hora, id);
-- One running task per key, enforced (a claim whose snapshot saw the key free
-- while another claim took it is refused, and skips the row).
CREATE UNIQUE INDEX {idx_lock_key_running} ON {table} (lock_key_running DESC{with_day});
-- Per-processo limits: the limited claim's look at the ready and running
-- tasks of one processo (docs/flow-control.md).
CREATE INDEX {idx_processo} ON {table} (processo, status, data_hora);
-- fair_key: the enqueue's look-up of a key's last ready task of one prioridade, whose
-- data_hora the key's next task follows (fleet/fair.py). fair_key_status is NULL on
-- tasks without a fair key, whose entries never change.
CREATE INDEX {idx_fair_key} ON {table} (fair_key, fair_key_status, prioridade, data_hora);
