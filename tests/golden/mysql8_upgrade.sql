-- Brings a queue table made for nsj-queue-lib 1.2.2 (the specification's
-- columns; 1.2.2 printed no MySQL DDL of its own) or by an earlier run of this
-- script to the current schema. MySQL 8 has neither ADD COLUMN IF NOT EXISTS
-- nor CREATE INDEX IF NOT EXISTS, so each step looks in information_schema
-- first and runs its statement only when the column or index is missing:
-- the script is idempotent and runs unchanged on MySQL 8 and MariaDB.
-- Existing column types are left as they are, but for the limits table's
-- paused_until (a UTC DATETIME since the TIMESTAMP ended in 2038).
-- db_gen --server mysql: for MySQL 8.0+ (and MariaDB 10.6+).

-- db_gen --upgrade for the other layout stops here, before it changes anything:
-- the statement it runs names an unknown column that says what to run instead.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = 'public' AND TABLE_NAME = 'fila_teste' AND PARTITION_NAME = 'p_hot') > 0, 'DO `fila_teste is partitioned: run db_gen --upgrade --layout partitioned`', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;

SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'prioridade') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN prioridade integer DEFAULT 50', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'dead') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN dead boolean NOT NULL DEFAULT false', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'live_id') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN live_id bigint', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'pub_sub') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN pub_sub boolean NOT NULL DEFAULT false', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'publication_id') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN publication_id bigint', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'subscriber_id') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN subscriber_id varchar(100)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'cancel_requested') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'progress_done') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN progress_done bigint', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'progress_total') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN progress_total bigint', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'progress_message') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN progress_message varchar(500)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'dedupe_key') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN dedupe_key varchar(200)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'lock_key') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN lock_key varchar(200)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'started_at') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN started_at timestamp(6) NULL DEFAULT NULL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'finished_at') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN finished_at timestamp(6) NULL DEFAULT NULL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'worker') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN worker varchar(200)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'trace_context') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN trace_context varchar(512)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'max_retry') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN max_retry integer', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'timeout_s') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN timeout_s double', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'next_try_priority') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN next_try_priority integer', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'fair_key') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN fair_key varchar(200)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'dedupe_active') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN dedupe_active varchar(200) GENERATED ALWAYS AS (CASE WHEN status IN (''pendente'', ''agendada'', ''processando'') THEN dedupe_key END) VIRTUAL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'lock_key_running') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN lock_key_running varchar(200) GENERATED ALWAYS AS (CASE WHEN status = ''processando'' THEN lock_key END) VIRTUAL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'lock_key_status') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN lock_key_status varchar(100) GENERATED ALWAYS AS (CASE WHEN lock_key IS NOT NULL THEN status END) VIRTUAL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste' AND column_name = 'fair_key_status') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN fair_key_status varchar(100) GENERATED ALWAYS AS (CASE WHEN fair_key IS NOT NULL THEN status END) VIRTUAL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;

-- Indexes whose columns changed since an earlier release (status left out:
-- indexes.sql says why), and the unique indexes made descending since (indexes.sql
-- says why), are rebuilt in place, under their own names.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_chain' AND column_name = 'status') > 0, 'ALTER TABLE public.fila_teste DROP INDEX idx_fila_teste_chain, ADD INDEX idx_fila_teste_chain (id_inicial)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_equivalent' AND column_name = 'status') > 0, 'ALTER TABLE public.fila_teste DROP INDEX idx_fila_teste_equivalent, ADD INDEX idx_fila_teste_equivalent (chave_externa, payload_hash)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_lock_key' AND column_name = 'status') > 0, 'ALTER TABLE public.fila_teste DROP INDEX idx_fila_teste_lock_key, ADD INDEX idx_fila_teste_lock_key (lock_key, lock_key_status, prioridade DESC, data_hora, id)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_dedupe' AND seq_in_index = 1 AND collation = 'A') > 0 AND (VERSION() LIKE '%MariaDB%' AND CAST(SUBSTRING_INDEX(VERSION(), '.', 1) AS UNSIGNED) * 100 + CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(VERSION(), '.', 2), '.', -1) AS UNSIGNED) >= 1008 OR VERSION() NOT LIKE '%MariaDB%' AND CAST(SUBSTRING_INDEX(VERSION(), '.', 1) AS UNSIGNED) * 100 + CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(VERSION(), '.', 2), '.', -1) AS UNSIGNED) >= 800), 'ALTER TABLE public.fila_teste DROP INDEX idx_fila_teste_dedupe, ADD UNIQUE INDEX idx_fila_teste_dedupe (dedupe_active DESC)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_lock_key_running' AND seq_in_index = 1 AND collation = 'A') > 0 AND (VERSION() LIKE '%MariaDB%' AND CAST(SUBSTRING_INDEX(VERSION(), '.', 1) AS UNSIGNED) * 100 + CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(VERSION(), '.', 2), '.', -1) AS UNSIGNED) >= 1008 OR VERSION() NOT LIKE '%MariaDB%' AND CAST(SUBSTRING_INDEX(VERSION(), '.', 1) AS UNSIGNED) * 100 + CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(VERSION(), '.', 2), '.', -1) AS UNSIGNED) >= 800), 'ALTER TABLE public.fila_teste DROP INDEX idx_fila_teste_lock_key_running, ADD UNIQUE INDEX idx_fila_teste_lock_key_running (lock_key_running DESC)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;

-- MySQL has no partial indexes: status leads every index the workers' claims
-- and scans use, so each reads only the rows of the status it looks for.
-- The claim: ready rows in claim order (higher priority first, then older),
-- read in index order up to the LIMIT, without sorting.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_claim') = 0, 'CREATE INDEX idx_fila_teste_claim ON public.fila_teste (status, prioridade DESC, data_hora, id)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- Rows of one status by time: the next wake-up, due retries, waiting tasks,
-- and the retry service's scan of running rows.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_due') = 0, 'CREATE INDEX idx_fila_teste_due ON public.fila_teste (status, data_hora)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- Purge: oldest rows first.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_data_hora') = 0, 'CREATE INDEX idx_fila_teste_data_hora ON public.fila_teste (data_hora)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- Purge keeps a first attempt while a later attempt still needs its payload.
-- No status here nor in the next index: a task changes status twice (claim,
-- outcome), and InnoDB rewrites every index holding it (a delete-mark and an
-- insert each); the few rows of one chain, or of one key and payload, are
-- read and their status checked on the row instead.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_chain') = 0, 'CREATE INDEX idx_fila_teste_chain ON public.fila_teste (id_inicial)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- QueueClient.list_equivalent_task.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_equivalent') = 0, 'CREATE INDEX idx_fila_teste_equivalent ON public.fila_teste (chave_externa, payload_hash)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
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
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_dedupe') = 0, 'CREATE UNIQUE INDEX idx_fila_teste_dedupe ON public.fila_teste (dedupe_active DESC)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- lock_key: the claim's two probes of a keyed candidate: the first ready task
-- of its key in claim order, and whether a task of its key is running. The
-- status is lock_key_status, NULL on unkeyed rows: their index entries never
-- change, where status would cost each unkeyed task two index rewrites.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_lock_key') = 0, 'CREATE INDEX idx_fila_teste_lock_key ON public.fila_teste (lock_key, lock_key_status, prioridade DESC, data_hora, id)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- One running task per key, enforced (a claim whose snapshot saw the key free
-- while another claim took it is refused, and skips the row).
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_lock_key_running') = 0, 'CREATE UNIQUE INDEX idx_fila_teste_lock_key_running ON public.fila_teste (lock_key_running DESC)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- Per-processo limits: the limited claim's look at the ready and running
-- tasks of one processo (docs/flow-control.md).
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_processo') = 0, 'CREATE INDEX idx_fila_teste_processo ON public.fila_teste (processo, status, data_hora)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- fair_key: the enqueue's look-up of a key's last ready task of one prioridade, whose
-- data_hora the key's next task follows (fleet/fair.py). fair_key_status is NULL on
-- tasks without a fair key, whose entries never change.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste' AND index_name = 'idx_fila_teste_fair_key') = 0, 'CREATE INDEX idx_fila_teste_fair_key ON public.fila_teste (fair_key, fair_key_status, prioridade, data_hora)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;

CREATE TABLE IF NOT EXISTS public.fila_teste_subscriber (
    id varchar(100) NOT NULL PRIMARY KEY,
    tenant bigint,
    grupo_empresarial varchar(40),
    processo varchar(250) NOT NULL,
    url varchar(2048),
    http_method varchar(8),
    headers json,
    ativo boolean NOT NULL DEFAULT true,
    created_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    -- The subscriber's circuit breaker (docs/fleet-control.md): after
    -- circuit_breaker_failures consecutive failed webhook deliveries, none is
    -- made for circuit_breaker_cool_down_s seconds, then one trial decides
    -- (NULL: no breaker). Its state, as the limits table's processo breakers
    -- keep theirs. breaker_until and breaker_trial_at are UTC DATETIMEs
    -- (written and compared with UTC_TIMESTAMP(6), as paused_until).
    circuit_breaker_failures integer,
    circuit_breaker_cool_down_s double,
    breaker_failures integer NOT NULL DEFAULT 0,
    breaker_open boolean NOT NULL DEFAULT false,
    breaker_until datetime(6),
    breaker_trial boolean NOT NULL DEFAULT false,
    breaker_trial_at datetime(6),
    breaker_trial_task bigint
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
-- Per-processo limits (docs/flow-control.md): one row per limited processo,
-- written by the workers at start from their @Task declarations, with the
-- state the limited claim shares across the cluster (the next start an
-- interval allows, the rate limiter's theoretical arrival time).
CREATE TABLE IF NOT EXISTS public.fila_teste_limits (
    processo varchar(250) NOT NULL PRIMARY KEY,
    max_concurrent integer NULL,
    rate_count integer NULL,
    rate_period_s double NULL,
    interval_min_s double NULL,
    interval_max_s double NULL,
    time_windows varchar(4000) NULL,
    next_start_at timestamp(6) NULL,
    rate_tat timestamp(6) NULL,
    declared_by varchar(200) NULL,
    declared_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    -- A pause (docs/fleet-control.md): no task of the processo ('' : of the
    -- queue) starts while paused, until paused_until (NULL: until resumed).
    -- paused_until is a UTC DATETIME, not a TIMESTAMP: an operator's until may
    -- lie past 2038 (a TIMESTAMP's end), and it is written and compared in
    -- UTC whatever the session's time zone (no daylight-saving fold).
    paused boolean NOT NULL DEFAULT false,
    paused_until datetime(6) NULL,
    -- The processo's circuit breaker (docs/fleet-control.md): its consecutive
    -- failures; open (no task starts until breaker_until, then one trial at a
    -- time); the trial started and not decided yet, when it started and its
    -- task (only that task's outcome decides; a trial undecided for too long
    -- counts as failed: fleet/breaker_recorder.py).
    breaker_failures integer NOT NULL DEFAULT 0,
    breaker_open boolean NOT NULL DEFAULT false,
    breaker_until timestamp(6) NULL,
    breaker_trial boolean NOT NULL DEFAULT false,
    breaker_trial_at timestamp(6) NULL,
    breaker_trial_task bigint NULL,
    -- At most this many running tasks of the processo per fair_key (NULL: no
    -- cap; unkeyed tasks are never counted). Last: --upgrade appends it.
    max_concurrent_per_key integer NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.statistics WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND index_name = 'idx_fila_teste_subscriber_processo') = 0, 'CREATE INDEX idx_fila_teste_subscriber_processo ON public.fila_teste_subscriber (processo, tenant, grupo_empresarial)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND column_name = 'circuit_breaker_failures') = 0, 'ALTER TABLE public.fila_teste_subscriber ADD COLUMN circuit_breaker_failures integer', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND column_name = 'circuit_breaker_cool_down_s') = 0, 'ALTER TABLE public.fila_teste_subscriber ADD COLUMN circuit_breaker_cool_down_s double', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND column_name = 'breaker_failures') = 0, 'ALTER TABLE public.fila_teste_subscriber ADD COLUMN breaker_failures integer NOT NULL DEFAULT 0', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND column_name = 'breaker_open') = 0, 'ALTER TABLE public.fila_teste_subscriber ADD COLUMN breaker_open boolean NOT NULL DEFAULT false', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND column_name = 'breaker_until') = 0, 'ALTER TABLE public.fila_teste_subscriber ADD COLUMN breaker_until datetime(6)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND column_name = 'breaker_trial') = 0, 'ALTER TABLE public.fila_teste_subscriber ADD COLUMN breaker_trial boolean NOT NULL DEFAULT false', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND column_name = 'breaker_trial_at') = 0, 'ALTER TABLE public.fila_teste_subscriber ADD COLUMN breaker_trial_at datetime(6)', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_subscriber' AND column_name = 'breaker_trial_task') = 0, 'ALTER TABLE public.fila_teste_subscriber ADD COLUMN breaker_trial_task bigint', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'paused') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN paused boolean NOT NULL DEFAULT false', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'paused_until') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN paused_until datetime(6) NULL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'breaker_failures') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN breaker_failures integer NOT NULL DEFAULT 0', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'breaker_open') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN breaker_open boolean NOT NULL DEFAULT false', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'breaker_until') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN breaker_until timestamp(6) NULL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'breaker_trial') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN breaker_trial boolean NOT NULL DEFAULT false', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'breaker_trial_at') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN breaker_trial_at timestamp(6) NULL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'breaker_trial_task') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN breaker_trial_task bigint NULL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'max_concurrent_per_key') = 0, 'ALTER TABLE public.fila_teste_limits ADD COLUMN max_concurrent_per_key integer NULL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
-- paused_until, a TIMESTAMP before: a UTC DATETIME(6), converted in UTC.
SET @nsjq_time_zone = @@session.time_zone;
SET time_zone = '+00:00';
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_limits' AND column_name = 'paused_until' AND data_type = 'timestamp') > 0, 'ALTER TABLE public.fila_teste_limits MODIFY COLUMN paused_until datetime(6) NULL', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
SET time_zone = @nsjq_time_zone;

-- Periodic tasks (docs/periodic-tasks.md): the latest slot enqueued per processo.
-- Workers move last_slot forward with a conditional UPDATE in the transaction
-- that inserts the slot's task, so a slot is enqueued once in the cluster.
CREATE TABLE IF NOT EXISTS public.fila_teste_periodic (
    processo varchar(250) NOT NULL PRIMARY KEY,
    last_slot bigint NOT NULL,
    task_id bigint,
    updated_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The workers running on the queue (issue 37): each writes its row at start and
-- every heartbeat, with the processos it claims (a JSON array; NULL: every
-- processo), and deletes it when it stops. nsjq status names the ready
-- processos no live worker claims.
CREATE TABLE IF NOT EXISTS public.fila_teste_workers (
    worker varchar(200) NOT NULL PRIMARY KEY,
    processos longtext,
    started_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    seen_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
-- Counts of the queue's finished attempts (nsjq status; db/tally.py): the tally
-- service folds the attempts in order of id, per hour of data_hora (hours since
-- 1970-01-01 UTC), processo ('' for none) and status, so that status reads the
-- backlog, this table and the attempts since the last fold instead of the whole
-- history. Attempts unfinished when their ids were folded wait in the open
-- table until they end; the state table says how far the ids are folded.
CREATE TABLE IF NOT EXISTS public.fila_teste_tally (
    hour bigint NOT NULL,
    processo varchar(250) NOT NULL,
    status varchar(100) NOT NULL,
    tasks bigint NOT NULL,
    failed bigint NOT NULL,
    dead bigint NOT NULL,
    PRIMARY KEY (hour, processo, status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS public.fila_teste_tally_open (
    id bigint NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS public.fila_teste_tally_state (
    id integer NOT NULL PRIMARY KEY,
    folded_to bigint NOT NULL,
    seen bigint NOT NULL,
    folded_at timestamp(6) NULL
) ENGINE=InnoDB;

-- Dependencies between tasks (docs/how-to/dependencies.md, nsj_queue_lib/workflow/).
-- One row per (parent, child): parent_id is the parent's first attempt's id
-- (its id_inicial), child_id the child's. The claim procedure and the group's
-- end look a settled task up here by parent_id; parents() reads by child_id.
-- settled: the parent's end has been counted in the child's pending_parents (or
-- it had ended when the child was inserted); an edge is counted only when this
-- flips, so once whatever the parent does next (a retry by hand).
CREATE TABLE IF NOT EXISTS public.fila_teste_parents (
    parent_id BIGINT NOT NULL,
    child_id BIGINT NOT NULL,
    settled BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (parent_id, child_id),
    KEY idx_fila_teste_parents_child (child_id)
) ENGINE=InnoDB;

-- A child in 'aguardando': how many of its parents have not finished yet, and
-- what a parent that ends dead-lettered or 'cancelada' does to it ('cancel':
-- the child is cancelled; 'run': it counts as finished).
CREATE TABLE IF NOT EXISTS public.fila_teste_waiting (
    child_id BIGINT NOT NULL PRIMARY KEY,
    pending_parents INT NOT NULL,
    on_parent_failure VARCHAR(10) NOT NULL DEFAULT 'cancel'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Durable steps and waits (docs/how-to/durable-steps.md, nsj_queue_lib/workflow/steps.py):
-- one checkpoint per (task, name), task_id being the task's first attempt's id
-- (its id_inicial), so every attempt of the task finds it. result is the step's
-- JSON result, committed with the step's writes; attempt_id the attempt that
-- wrote it. A durable wait's checkpoint names the event it waits for in
-- waiting_for until the event arrives (send_event looks there).
CREATE TABLE IF NOT EXISTS public.fila_teste_steps (
    task_id BIGINT NOT NULL,
    name VARCHAR(200) NOT NULL,
    result LONGTEXT NOT NULL,
    attempt_id BIGINT NOT NULL,
    waiting_for VARCHAR(200) NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (task_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The events sent to tasks (QueueClient.send_event), kept whether or not the
-- task waits for them yet; task_id is the task's first attempt's id. A task's
-- n-th wait_event of a name gets its n-th event of that name (by id).
CREATE TABLE IF NOT EXISTS public.fila_teste_events (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_id BIGINT NOT NULL,
    name VARCHAR(200) NOT NULL,
    payload LONGTEXT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY idx_fila_teste_events_task (task_id, name, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The children of a settled parent (its first attempt's id), released in the
-- settling transaction: its unsettled edges flip and each of their children's
-- count goes down by one, then those whose count reaches 0 become 'pendente'.
-- Three statements whatever the number of children: no query per child. The
-- first reads the parent's edges in primary key order (STRAIGHT_JOIN: edges
-- first), so the children's counts are locked in child id order, as every
-- other settling transaction locks them: no deadlock between two parents with
-- shared children. The second settles edges of children no longer waiting.
-- Their reads are locking reads (InnoDB reads the tables an UPDATE joins but does not
-- change with shared locks, as of their latest commit), so a child committed after
-- the handler's snapshot counts. The third joins from the parent's
-- edges to its children by key (STRAIGHT_JOIN): MariaDB 10.11 runs an UPDATE's
-- IN (subquery) once per row of the updated table, which read every waiting task of
-- the queue at each release; the children are unfinished, so on the partitioned
-- layout the join is pinned to the hot partition (by id alone: every partition).
DROP PROCEDURE IF EXISTS public.release_fila_teste;
DELIMITER //
CREATE PROCEDURE public.release_fila_teste(IN p_parent BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    UPDATE public.fila_teste_parents AS p STRAIGHT_JOIN public.fila_teste_waiting AS w ON w.child_id = p.child_id
    SET w.pending_parents = w.pending_parents - 1, p.settled = TRUE
    WHERE p.parent_id = p_parent AND NOT p.settled;
    UPDATE public.fila_teste_parents SET settled = TRUE WHERE parent_id = p_parent AND NOT settled;
    UPDATE public.fila_teste_parents AS p
        STRAIGHT_JOIN public.fila_teste_waiting AS w ON w.child_id = p.child_id
        STRAIGHT_JOIN public.fila_teste AS t ON t.id = w.child_id
    SET t.status = 'pendente'
    WHERE p.parent_id = p_parent AND w.pending_parents <= 0 AND t.status = 'aguardando';
END//
DELIMITER ;

-- Workflows (nsj_queue_lib/workflow/builder.py, docs/how-to/workflows.md): one
-- row per Workflow enqueued. Its id is its first task's id, so it needs no
-- sequence of its own and a workflow's tasks are found from any of them.
CREATE TABLE IF NOT EXISTS public.fila_teste_workflows (
    id BIGINT NOT NULL PRIMARY KEY,
    name VARCHAR(200) NOT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A workflow's tasks (their first attempts' ids) in the order they were added;
-- the edges between them are the dependencies' (the parents table). task_id is
-- indexed for the console's link from a task to its workflow.
CREATE TABLE IF NOT EXISTS public.fila_teste_workflow_tasks (
    workflow_id BIGINT NOT NULL,
    seq INT NOT NULL,
    task_id BIGINT NOT NULL,
    PRIMARY KEY (workflow_id, seq),
    KEY idx_fila_teste_workflow_task (task_id)
) ENGINE=InnoDB;

-- Process instances (nsj_queue_lib/process/, docs/how-to/processes.md). One row
-- per process: the handler's state (a JSON document), status and detail, saved
-- with the commit of the task that set them. corrupted_by: the task whose dead
-- letter corrupted the process (only repair tasks run until one succeeds);
-- timer_task_id: its pending timer (set_timer replaces it); remove_at: when the
-- purge service deletes the process and its history (remove_after).
CREATE TABLE IF NOT EXISTS public.fila_teste_processes (
    process_id VARCHAR(190) NOT NULL PRIMARY KEY,
    processo VARCHAR(250) NOT NULL,
    status VARCHAR(100) NULL,
    detail LONGTEXT NULL,
    state LONGTEXT NOT NULL,
    corrupted_by BIGINT NULL,
    timer_task_id BIGINT NULL,
    remove_at TIMESTAMP(6) NULL DEFAULT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY idx_fila_teste_process_removal (remove_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Each task of a process (its first attempt's id): what it is ('start', 'call',
-- 'repair', 'timer') and, once it succeeded, its handler's response (JSON text),
-- which a synchronous caller reads.
CREATE TABLE IF NOT EXISTS public.fila_teste_process_tasks (
    task_id BIGINT NOT NULL PRIMARY KEY,
    process_id VARCHAR(190) NOT NULL,
    kind VARCHAR(10) NOT NULL,
    response LONGTEXT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY idx_fila_teste_process_tasks (process_id, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A process's event history (emit), in the order written.
CREATE TABLE IF NOT EXISTS public.fila_teste_process_events (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    process_id VARCHAR(190) NOT NULL,
    task_id BIGINT NULL,
    event_type VARCHAR(100) NOT NULL,
    payload LONGTEXT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY idx_fila_teste_process_events (process_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'fila_teste_parents' AND column_name = 'settled') = 0, 'ALTER TABLE public.fila_teste_parents ADD COLUMN settled BOOLEAN NOT NULL DEFAULT FALSE', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;

-- The claim procedure of this release (claim_next_<queue>_v<N>) replaces an
-- earlier build of itself. Earlier releases' procedures stay, for their workers
-- during a rolling upgrade: db_gen --drop-old-routines drops them afterwards.
DROP PROCEDURE IF EXISTS public.claim_next_fila_teste_v2;
-- What an executor sends after a task: one short CALL per task. With a
-- finished task (p_task_id), its 'sucesso', committed, and the release of
-- its liveness lock; then the claim of the next ready task in claim order
-- (prioridade DESC, data_hora, id), skipping rows other claims hold, with
-- its liveness lock taken by this session; then COMMIT AND CHAIN, which
-- commits the claim and opens the task's transaction. Workers check the
-- COMMENT at start and refuse a procedure of another version. The CALL's one
-- result set is one row, one JSON column: the claimed task with the liveness
-- lock's GET_LOCK result, or NULL when nothing was ready.
-- After a failed call, @nsjq_completed = p_task_id tells the caller that the
-- completion was committed (only the claim failed), and @nsjq_claimed which
-- task's lock the claim may have taken. Neither is reset at the start: a
-- value left by an earlier call names another task, and releasing a lock
-- this session does not hold does nothing.
--
-- Where the claim starts reading. InnoDB leaves the claim index entry of a
-- claimed task in place, delete-marked, until purge removes it: during a
-- drain many such entries lie ahead of the first ready task, and a locking
-- read from the start of the 'pendente' range would lock every one of them,
-- queueing concurrent claims behind each other. So the procedure first finds
-- the first ready task without locks and without a snapshot (READ
-- UNCOMMITTED, for that one statement), then locks from there on. The
-- look-up needs a statement of its own outside any transaction: that is why
-- the completion commits before the claim, and why a failing claim never
-- takes the finished task's work with it.
--
-- The look-up is the procedure's most expensive statement, so its answer is
-- reused for 20 ms: until then an executor's claim starts at its own last
-- claimed task (@nsjq_position_*, per queue); between there and the first
-- ready task lie only the tasks other executors claimed since. A task that
-- becomes ready ahead of that position in the meantime (a higher priority, a
-- retry, a task given back) waits for the next look-up: claim order may lag
-- by up to 20 ms, never more. When nothing is ready after the position, the
-- claim looks up at once, so "nothing claimed" always comes from a look-up.
--
-- lock_key: the locking reads skip a task whose key is busy (a task of its
-- key is running or comes first; nsj_queue_lib/flow/lock_keys.py). The
-- look-up does not: it only says where to start reading. A task refused by
-- the unique index of running keys (another claim took its key after this
-- one's snapshot) is given back and the claim starts over, at most 3 times.
--
-- Deliveries (rows with a subscriber_id) are claimed only for the subscribers
-- in p_handled_subscribers, a JSON array (NULL: every subscriber;
-- nsj_queue_lib/flow/deliveries.py), and tasks only of the processos in
-- p_handled_processos (NULL: every processo). The look-up ignores both, as
-- lock_key.
-- Nor do they take a task of a limited processo: only the limited claim does
-- (flow/limits.py).
--
-- Group commit (QUEUE_BATCH_SIZE > 1) sets @nsjq_claim_limit before the CALL
-- (each CALL resets it): the procedure then claims up to that many tasks in
-- one transaction and returns them in claim order (one NULL row when none),
-- their ids also in @nsjq_claimed_batch for the caller to release after a
-- failed CALL (named as their locks are taken). The batch is claimed
-- set-based: one locking read of up to that many rows (their liveness locks
-- taken, and the position set, as it reads them), one UPDATE of their ids,
-- the commit. Each task is a JSON array: the values of model.QUEUE_COLUMNS in
-- that order, then whether its liveness lock was taken (1 or 0); without the
-- names the server builds and the worker parses less per task
-- (db/mysql/rows.py). Usually the locking read builds them as it reads, and
-- the CALL returns one row (column task_rows): the JSON array of the tasks'
-- arrays, one row for the worker to read instead of one per task. The rows
-- are read again after the commit, one per task (column task_row), when
-- what the locking read built will not do: a later attempt needs its first
-- attempt's payload, a liveness lock was held elsewhere, or the text
-- reached about 128 KiB (or max_allowed_packet: CONCAT gives NULL). A task
-- claimed alone stays an object, which the previous release's workers read
-- (previous_claim.sql calls this procedure). MariaDB pays more per statement
-- than per row: one statement per claimed task cost about four times the
-- server CPU of this. If that UPDATE meets the unique index of
-- running keys (two tasks of one lock_key, or a concurrent claim took a
-- key), the batch is undone and claimed one task at a time instead, each
-- claim going on from the previous one's position (the statements between
-- "batch: LOOP" and its end, not re-indented), returned as one JSON array:
-- a lock_key lost to the unique index, or nothing ready after the
-- position, ends that batch. Any error after the first claim of a batch
-- fails the CALL (a deadlock has rolled the whole transaction back).
--
-- The three locking reads' conditions (ready, its lock_key free, deliverable,
-- no limits; the same from the position on) are one text,
-- db/mysql/claim_where.py.
--
-- MariaDB spends more on running a statement than on the rows it touches,
-- hence the claim's shape: the locking read itself builds the row's JSON and
-- takes the liveness lock (status already says 'processando', which the
-- next statement writes), and the result is sent after the commit, so the
-- worker reads the row and the end of the CALL in one go.
--
-- This is the MySQL variant (db_gen --server mysql): MySQL 8.0 has no
-- EXECUTE IMMEDIATE and deprecates assigning user variables inside
-- expressions, so the set-based batch reads its rows with a cursor and runs
-- its dynamic statements with PREPARE/EXECUTE. It also runs on MariaDB; the
-- MariaDB variant (the default) costs MariaDB fewer statements per batch.
DELIMITER //
CREATE PROCEDURE public.claim_next_fila_teste_v2(
    IN p_task_id BIGINT,
    IN p_mensagem VARCHAR(500) CHARACTER SET utf8mb4,
    IN p_lock_prefix VARCHAR(64),
    IN p_handled_subscribers LONGTEXT CHARACTER SET utf8mb4,
    IN p_handled_processos LONGTEXT CHARACTER SET utf8mb4,
    IN p_worker VARCHAR(200) CHARACTER SET utf8mb4
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT 'nsj_queue_lib claim 94ddf05e314b3b21'
BEGIN
    DECLARE v_prioridade INT;
    DECLARE v_data_hora TIMESTAMP(6);
    DECLARE v_id BIGINT;
    DECLARE v_remembered BOOLEAN;
    DECLARE v_lookup_failed BOOLEAN DEFAULT FALSE;
    DECLARE v_claimed BIGINT;
    DECLARE v_first_attempt BIGINT;
    DECLARE v_task LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_keys_lost INT DEFAULT 0;
    DECLARE v_limit INT DEFAULT GREATEST(COALESCE(@nsjq_claim_limit, 1), 1);
    DECLARE v_count INT DEFAULT 0;
    DECLARE v_batch LONGTEXT CHARACTER SET utf8mb4;
    -- The set-based batch: its ids (NULL once undone), how many of its
    -- liveness locks were taken; v_one_by_one after a lock_key conflict.
    DECLARE v_ids LONGTEXT CHARACTER SET ascii;
    DECLARE v_locked INT;
    DECLARE v_min_id BIGINT;
    DECLARE v_max_id BIGINT;
    DECLARE v_one_by_one BOOLEAN DEFAULT FALSE;
    -- The set-based batch's rows as its locking read built them (one JSON
    -- array of arrays), unless a row needs reading again (see below).
    DECLARE v_needs_read INT;
    DECLARE v_rows LONGTEXT CHARACTER SET utf8mb4;
    -- The finished task's first attempt, and whether children wait for it.
    DECLARE v_done_first BIGINT;
    DECLARE v_children INT DEFAULT 0;
    -- No ready task: SELECT ... INTO assigns nothing, and that is no error here.
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    SET @nsjq_claim_limit = NULL, @nsjq_claimed_batch = NULL;
    IF p_task_id IS NOT NULL THEN
        -- Its first attempt's id, read while the row is still in the hot partition: after
        -- the settle moved it to its day's, a read by id alone probed every partition's
        -- primary key (on a partitioned table with 60 days of history, every success).
        SELECT COALESCE(id_inicial, id) INTO v_done_first FROM public.fila_teste
        WHERE id = p_task_id;
        UPDATE public.fila_teste
        SET status = 'sucesso', mensagem = p_mensagem, finished_at = NOW(6)
        WHERE id = p_task_id AND status = 'processando';
        -- The fence: an attempt that no longer owns its row (another worker
        -- rescued it and runs it again) must not commit its handler's writes.
        IF ROW_COUNT() = 0 THEN
            ROLLBACK;
            DO RELEASE_LOCK(CONCAT(p_lock_prefix, p_task_id));
            SIGNAL SQLSTATE '45000'
                SET MESSAGE_TEXT = 'nsjq fenced: the task is no longer processando';
        END IF;
        -- Its children waiting for it (workflow/dependencies.py), released in the
        -- same commit. A locking read: it sees a child committed after this
        -- transaction's snapshot (the child's insert held the row's lock till then).
        SELECT COUNT(*) INTO v_children FROM public.fila_teste_parents
        WHERE parent_id = v_done_first LOCK IN SHARE MODE;
        IF v_children > 0 THEN
            CALL public.release_fila_teste(v_done_first);
        END IF;
    END IF;
    -- Also ends the empty transaction a first claim is called in. The
    -- liveness lock goes once the task is 'sucesso' for everyone.
    COMMIT;
    SET @nsjq_completed = p_task_id,
        @nsjq_released = IF(p_task_id IS NULL, NULL, RELEASE_LOCK(CONCAT(p_lock_prefix, p_task_id)));
    -- Where the claim starts: this session's last claim of this queue while
    -- its look-up is recent (data_hora kept as a number: a handler may change
    -- the session's time zone), else the first ready task.
    SET v_remembered = COALESCE(UNIX_TIMESTAMP(NOW(6)) < @nsjq_position_until
                                AND @nsjq_position_queue = p_lock_prefix, FALSE);
    IF v_remembered THEN
        SET v_prioridade = @nsjq_position_prioridade,
            v_data_hora = FROM_UNIXTIME(@nsjq_position_data_hora),
            v_id = @nsjq_position_id;
    END IF;
    batch: LOOP
    claim: LOOP
        IF NOT v_remembered THEN
            BEGIN
                -- If the look-up fails (its index was dropped, say), the claim
                -- reads from the start. A statement that fails before it starts
                -- leaves READ UNCOMMITTED pending for the next transaction: that
                -- one gets the executors' level instead.
                DECLARE CONTINUE HANDLER FOR SQLEXCEPTION
                BEGIN
                    SET v_lookup_failed = TRUE;
                    SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;
                END;
                SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;
                SELECT t.prioridade, t.data_hora, t.id INTO v_prioridade, v_data_hora, v_id
                FROM public.fila_teste AS t FORCE INDEX (idx_fila_teste_claim)
                WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
                ORDER BY t.prioridade DESC, t.data_hora, t.id
                LIMIT 1;
            END;
            -- No position without the claim index (the look-up failed).
            SET @nsjq_position_queue = IF(v_lookup_failed, NULL, p_lock_prefix),
                @nsjq_position_until = UNIX_TIMESTAMP(NOW(6)) + 0.02;
        END IF;
        IF v_count = 0 THEN
            START TRANSACTION;
        END IF;
        IF v_limit > 1 AND NOT v_one_by_one AND v_id IS NOT NULL THEN
            -- MySQL 8 deprecates assigning user variables inside expressions,
            -- so this variant reads the batch with a cursor: its locking read
            -- locks the rows (OPEN), then each row, in claim order, is named
            -- in @nsjq_claimed_batch, its liveness lock taken, its array
            -- appended and the position set, one SET at a time. The same
            -- results as the MariaDB variant's one statement (text that would
            -- pass 128 KiB makes the rows read again after the commit).
            BEGIN
                DECLARE v_done BOOLEAN DEFAULT FALSE;
                DECLARE v_row_id BIGINT;
                DECLARE v_row_prioridade INT;
                DECLARE v_row_data_hora DECIMAL(24, 6);
                DECLARE v_row LONGTEXT CHARACTER SET utf8mb4;
                DECLARE v_row_needs_read INT;
                DECLARE v_row_locked INT;
                DECLARE c_batch CURSOR FOR
                    SELECT t.id, t.prioridade, UNIX_TIMESTAMP(t.data_hora),
                           JSON_ARRAY(t.id, t.id_inicial, t.data_hora_inicial, t.data_hora, t.origem, t.destino, t.processo, t.chave_externa, t.proxima_tentativa, t.tentativa, 'processando', t.reenfileirado, t.estouro_tentativas, t.mensagem, t.id_anterior, t.data_hora_anterior, t.status_anterior, t.mensagem_anterior, t.payload, t.tenant, t.grupo_empresarial, HEX(t.payload_hash), t.pub_sub, t.publication_id, t.subscriber_id, t.dead, t.live_id, t.prioridade, t.trace_context, t.max_retry, t.timeout_s, t.next_try_priority, t.lock_key, 1),
                           t.payload IS NULL AND t.id_inicial IS NOT NULL
                    FROM public.fila_teste AS t FORCE INDEX (idx_fila_teste_claim)
                    WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
      AND (t.prioridade < v_prioridade OR t.prioridade IS NULL OR (t.prioridade = v_prioridade AND (t.data_hora > v_data_hora OR (t.data_hora = v_data_hora AND t.id >= v_id))))
      AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (t.subscriber_id IS NULL OR p_handled_subscribers IS NULL OR JSON_CONTAINS(p_handled_subscribers, JSON_QUOTE(t.subscriber_id))) AND (p_handled_processos IS NULL OR JSON_CONTAINS(p_handled_processos, JSON_QUOTE(t.processo)))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > UTC_TIMESTAMP(6)))) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS lim WHERE lim.processo = t.processo AND ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > UTC_TIMESTAMP(6))) OR lim.breaker_open) LIMIT 1 OFFSET 0)
                    ORDER BY t.prioridade DESC, t.data_hora, t.id
                    LIMIT v_limit
                    FOR UPDATE SKIP LOCKED;
                DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;
                SET @nsjq_claimed_rows = '', @nsjq_claimed_chunk = '',
                    v_count = 0, v_locked = 0, v_needs_read = 0, v_min_id = NULL, v_max_id = NULL;
                OPEN c_batch;
                batch_rows: LOOP
                    FETCH c_batch INTO v_row_id, v_row_prioridade, v_row_data_hora, v_row, v_row_needs_read;
                    IF v_done THEN
                        LEAVE batch_rows;
                    END IF;
                    SET @nsjq_claimed_batch = CONCAT_WS(',', @nsjq_claimed_batch, v_row_id);
                    SET v_row_locked = GET_LOCK(CONCAT(p_lock_prefix, v_row_id), 0);
                    SET v_count = v_count + 1,
                        v_locked = v_locked + IF(v_row_locked = 1, 1, 0),
                        v_min_id = LEAST(COALESCE(v_min_id, v_row_id), v_row_id),
                        v_max_id = GREATEST(COALESCE(v_max_id, v_row_id), v_row_id),
                        @nsjq_position_prioridade = v_row_prioridade,
                        @nsjq_position_data_hora = v_row_data_hora,
                        @nsjq_position_id = v_row_id,
                        @nsjq_claimed_rows = IF(LENGTH(@nsjq_claimed_rows) + LENGTH(v_row) > 131072, NULL,
                                                CONCAT(@nsjq_claimed_rows, ',', v_row));
                    SET v_needs_read = v_needs_read + COALESCE(v_row_needs_read, 0)
                                       + IF(@nsjq_claimed_rows IS NULL, 1, 0);
                END LOOP;
                CLOSE c_batch;
            END;
            IF v_count > 0 THEN
                SET v_ids = @nsjq_claimed_batch;
                BEGIN
                    DECLARE CONTINUE HANDLER FOR 1062 SET v_one_by_one = TRUE;
                    -- v_ids: the table's own BIGINT ids, digits and commas only.
                    SET @nsjq_statement = CONCAT('UPDATE public.fila_teste SET status = ''processando'', started_at = NOW(6), worker = ? WHERE id IN (', v_ids, ')'),
                        @nsjq_worker = p_worker;
                    PREPARE nsjq_claim_statement FROM @nsjq_statement;
                    EXECUTE nsjq_claim_statement USING @nsjq_worker;
                    DEALLOCATE PREPARE nsjq_claim_statement;
                    SET @nsjq_statement = NULL;
                END;
                IF v_one_by_one THEN
                    -- Undo the batch, its liveness locks too, and claim one by one.
                    ROLLBACK;
                    SELECT COUNT(RELEASE_LOCK(CONCAT(p_lock_prefix, j.id))) INTO v_count
                    FROM JSON_TABLE(CONCAT('[', v_ids, ']'), '$[*]' COLUMNS (id BIGINT PATH '$')) AS j;
                    SET @nsjq_claimed_batch = NULL, v_count = 0, v_ids = NULL,
                        @nsjq_claimed_rows = NULL, @nsjq_claimed_chunk = NULL,
                        @nsjq_position_prioridade = v_prioridade,
                        @nsjq_position_data_hora = UNIX_TIMESTAMP(v_data_hora),
                        @nsjq_position_id = v_id,
                        v_remembered = FALSE, v_id = NULL;
                    ITERATE claim;
                END IF;
            ELSE
                SET v_ids = NULL;
            END IF;
        -- GET_LOCK runs for the one row the claim returns. Later attempts keep
        -- no payload of their own: v_first_attempt says where it is.
        ELSEIF v_id IS NOT NULL THEN
            BEGIN
                -- A claim from a remembered position that fails (a deadlock,
                -- the claim index dropped) starts over from a look-up; the
                -- liveness lock it may have taken goes first.
                DECLARE CONTINUE HANDLER FOR SQLEXCEPTION
                BEGIN
                    IF NOT v_remembered OR v_count > 0 THEN
                        RESIGNAL;
                    END IF;
                    SET v_claimed = NULL,
                        @nsjq_released = RELEASE_LOCK(CONCAT(p_lock_prefix, @nsjq_claimed));
                END;
                SELECT t.id, t.id, IF(t.payload IS NULL, t.id_inicial, NULL),
                       JSON_OBJECT('liveness_locked', GET_LOCK(CONCAT(p_lock_prefix, t.id), 0), 'id', t.id, 'id_inicial', t.id_inicial, 'data_hora_inicial', t.data_hora_inicial, 'data_hora', t.data_hora, 'origem', t.origem, 'destino', t.destino, 'processo', t.processo, 'chave_externa', t.chave_externa, 'proxima_tentativa', t.proxima_tentativa, 'tentativa', t.tentativa, 'status', 'processando', 'reenfileirado', t.reenfileirado, 'estouro_tentativas', t.estouro_tentativas, 'mensagem', t.mensagem, 'id_anterior', t.id_anterior, 'data_hora_anterior', t.data_hora_anterior, 'status_anterior', t.status_anterior, 'mensagem_anterior', t.mensagem_anterior, 'payload', t.payload, 'tenant', t.tenant, 'grupo_empresarial', t.grupo_empresarial, 'payload_hash', HEX(t.payload_hash), 'pub_sub', t.pub_sub, 'publication_id', t.publication_id, 'subscriber_id', t.subscriber_id, 'dead', t.dead, 'live_id', t.live_id, 'prioridade', t.prioridade, 'trace_context', t.trace_context, 'max_retry', t.max_retry, 'timeout_s', t.timeout_s, 'next_try_priority', t.next_try_priority, 'lock_key', t.lock_key),
                       t.prioridade, UNIX_TIMESTAMP(t.data_hora), t.id
                INTO v_claimed, @nsjq_claimed, v_first_attempt, v_task,
                     @nsjq_position_prioridade, @nsjq_position_data_hora, @nsjq_position_id
                FROM public.fila_teste AS t FORCE INDEX (idx_fila_teste_claim)
                WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
      AND (t.prioridade < v_prioridade OR t.prioridade IS NULL OR (t.prioridade = v_prioridade AND (t.data_hora > v_data_hora OR (t.data_hora = v_data_hora AND t.id >= v_id))))
      AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (t.subscriber_id IS NULL OR p_handled_subscribers IS NULL OR JSON_CONTAINS(p_handled_subscribers, JSON_QUOTE(t.subscriber_id))) AND (p_handled_processos IS NULL OR JSON_CONTAINS(p_handled_processos, JSON_QUOTE(t.processo)))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > UTC_TIMESTAMP(6)))) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS lim WHERE lim.processo = t.processo AND ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > UTC_TIMESTAMP(6))) OR lim.breaker_open) LIMIT 1 OFFSET 0)
                ORDER BY t.prioridade DESC, t.data_hora, t.id
                LIMIT 1
                FOR UPDATE SKIP LOCKED;
            END;
        ELSEIF v_lookup_failed THEN
            SELECT t.id, t.id, IF(t.payload IS NULL, t.id_inicial, NULL),
                   JSON_OBJECT('liveness_locked', GET_LOCK(CONCAT(p_lock_prefix, t.id), 0), 'id', t.id, 'id_inicial', t.id_inicial, 'data_hora_inicial', t.data_hora_inicial, 'data_hora', t.data_hora, 'origem', t.origem, 'destino', t.destino, 'processo', t.processo, 'chave_externa', t.chave_externa, 'proxima_tentativa', t.proxima_tentativa, 'tentativa', t.tentativa, 'status', 'processando', 'reenfileirado', t.reenfileirado, 'estouro_tentativas', t.estouro_tentativas, 'mensagem', t.mensagem, 'id_anterior', t.id_anterior, 'data_hora_anterior', t.data_hora_anterior, 'status_anterior', t.status_anterior, 'mensagem_anterior', t.mensagem_anterior, 'payload', t.payload, 'tenant', t.tenant, 'grupo_empresarial', t.grupo_empresarial, 'payload_hash', HEX(t.payload_hash), 'pub_sub', t.pub_sub, 'publication_id', t.publication_id, 'subscriber_id', t.subscriber_id, 'dead', t.dead, 'live_id', t.live_id, 'prioridade', t.prioridade, 'trace_context', t.trace_context, 'max_retry', t.max_retry, 'timeout_s', t.timeout_s, 'next_try_priority', t.next_try_priority, 'lock_key', t.lock_key),
                   t.prioridade, UNIX_TIMESTAMP(t.data_hora), t.id
            INTO v_claimed, @nsjq_claimed, v_first_attempt, v_task,
                 @nsjq_position_prioridade, @nsjq_position_data_hora, @nsjq_position_id
            FROM public.fila_teste AS t
            WHERE t.status = 'pendente' AND t.data_hora <= NOW(6)
      AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (t.subscriber_id IS NULL OR p_handled_subscribers IS NULL OR JSON_CONTAINS(p_handled_subscribers, JSON_QUOTE(t.subscriber_id))) AND (p_handled_processos IS NULL OR JSON_CONTAINS(p_handled_processos, JSON_QUOTE(t.processo)))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > UTC_TIMESTAMP(6)))) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS lim WHERE lim.processo = t.processo AND ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > UTC_TIMESTAMP(6))) OR lim.breaker_open) LIMIT 1 OFFSET 0)
            ORDER BY t.prioridade DESC, t.data_hora, t.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
        END IF;
        IF v_claimed IS NOT NULL THEN
            BEGIN
                -- Refused by the unique index of running keys: a concurrent claim
                -- took this task's lock_key after this claim's snapshot saw it
                -- free. Undo, and claim again with a snapshot that sees it busy.
                DECLARE CONTINUE HANDLER FOR 1062
                    SET v_keys_lost = v_keys_lost + 1, v_claimed = NULL;
                UPDATE public.fila_teste
                SET status = 'processando', started_at = NOW(6), worker = p_worker
                WHERE id = v_claimed;
            END;
            IF v_claimed IS NULL AND v_count > 0 THEN
                SET @nsjq_released = RELEASE_LOCK(CONCAT(p_lock_prefix, @nsjq_claimed));
                LEAVE claim;
            END IF;
            IF v_claimed IS NULL THEN
                ROLLBACK;
                SET @nsjq_released = RELEASE_LOCK(CONCAT(p_lock_prefix, @nsjq_claimed)),
                    v_remembered = FALSE, v_id = NULL, v_task = NULL;
                IF v_keys_lost >= 3 THEN
                    LEAVE claim;
                END IF;
                ITERATE claim;
            END IF;
        END IF;
        IF v_claimed IS NOT NULL OR NOT v_remembered OR v_count > 0 THEN
            LEAVE claim;
        END IF;
        -- Nothing ready after the position: look from the first ready task.
        ROLLBACK;
        SET v_remembered = FALSE, v_id = NULL;
    END LOOP;
    IF v_claimed IS NOT NULL THEN
        IF v_first_attempt IS NOT NULL THEN
            SET v_task = JSON_SET(v_task, '$.payload',
                                  (SELECT f.payload FROM public.fila_teste AS f WHERE f.id = v_first_attempt));
        END IF;
    END IF;
    IF v_limit > 1 AND v_claimed IS NOT NULL THEN
        SET v_count = v_count + 1, v_batch = CONCAT_WS(',', v_batch, v_task),
            @nsjq_claimed_batch = CONCAT_WS(',', @nsjq_claimed_batch, v_claimed);
        IF v_count < v_limit THEN
            SET v_remembered = TRUE, v_prioridade = @nsjq_position_prioridade,
                v_data_hora = FROM_UNIXTIME(@nsjq_position_data_hora), v_id = @nsjq_position_id,
                v_claimed = NULL, v_first_attempt = NULL, v_task = NULL, v_keys_lost = 0;
            ITERATE batch;
        END IF;
    END IF;
    LEAVE batch;
    END LOOP batch;
    IF v_ids IS NOT NULL THEN
        -- The set-based batch: the arrays its locking read built, in one row,
        -- when every liveness lock was taken and no row needs reading again;
        -- else its rows as committed, one JSON array each (the values of
        -- QUEUE_COLUMNS in order, then the liveness lock's result: 1 when
        -- every lock was taken, else whether this session holds the task's).
        SET v_rows = IF(v_needs_read = 0 AND v_locked = v_count,
                        CONCAT('[', SUBSTRING(CONCAT(@nsjq_claimed_rows, @nsjq_claimed_chunk), 2), ']'),
                        NULL),
            @nsjq_claimed_rows = NULL, @nsjq_claimed_chunk = NULL;
        COMMIT AND CHAIN;
        IF v_rows IS NOT NULL THEN
            SELECT v_rows AS task_rows;
        ELSEIF v_max_id - v_min_id < 2 * v_count THEN
            -- Ids close together (a drain in order, the usual case): a static
            -- statement reading that stretch of the primary key costs the
            -- server less than building, parsing and planning one with the
            -- ids in it; FIND_IN_SET keeps the batch's rows only.
            SELECT JSON_ARRAY(t.id, t.id_inicial, t.data_hora_inicial, t.data_hora, t.origem, t.destino, t.processo, t.chave_externa, t.proxima_tentativa, t.tentativa, t.status, t.reenfileirado, t.estouro_tentativas, t.mensagem, t.id_anterior, t.data_hora_anterior, t.status_anterior, t.mensagem_anterior, COALESCE(t.payload, first_attempt.payload), t.tenant, t.grupo_empresarial, HEX(t.payload_hash), t.pub_sub, t.publication_id, t.subscriber_id, t.dead, t.live_id, t.prioridade, t.trace_context, t.max_retry, t.timeout_s, t.next_try_priority, t.lock_key,
                              IF(v_locked = v_count, 1,
                                 IS_USED_LOCK(CONCAT(p_lock_prefix, t.id)) <=> CONNECTION_ID())) AS task_row
            FROM public.fila_teste AS t
            LEFT JOIN public.fila_teste AS first_attempt
                ON first_attempt.id = t.id_inicial AND t.payload IS NULL
            WHERE t.id BETWEEN v_min_id AND v_max_id AND FIND_IN_SET(t.id, v_ids)
            ORDER BY t.prioridade DESC, t.data_hora, t.id;
        ELSE
            SET @nsjq_statement = CONCAT(
                'SELECT JSON_ARRAY(t.id, t.id_inicial, t.data_hora_inicial, t.data_hora, t.origem, t.destino, t.processo, t.chave_externa, t.proxima_tentativa, t.tentativa, t.status, t.reenfileirado, t.estouro_tentativas, t.mensagem, t.id_anterior, t.data_hora_anterior, t.status_anterior, t.mensagem_anterior, COALESCE(t.payload, first_attempt.payload), t.tenant, t.grupo_empresarial, HEX(t.payload_hash), t.pub_sub, t.publication_id, t.subscriber_id, t.dead, t.live_id, t.prioridade, t.trace_context, t.max_retry, t.timeout_s, t.next_try_priority, t.lock_key, ',
                IF(v_locked = v_count, '1',
                   CONCAT('IS_USED_LOCK(CONCAT(', QUOTE(p_lock_prefix), ', t.id)) <=> CONNECTION_ID()')),
                ') AS task_row FROM public.fila_teste AS t LEFT JOIN public.fila_teste AS first_attempt',
                ' ON first_attempt.id = t.id_inicial AND t.payload IS NULL WHERE t.id IN (', v_ids,
                ') ORDER BY t.prioridade DESC, t.data_hora, t.id');
            PREPARE nsjq_claim_statement FROM @nsjq_statement;
            EXECUTE nsjq_claim_statement;
            DEALLOCATE PREPARE nsjq_claim_statement;
            SET @nsjq_statement = NULL;
        END IF;
    ELSE
        IF v_limit > 1 THEN
            SET v_task = IF(v_count = 0, NULL, CONCAT('[', v_batch, ']'));
        END IF;
        COMMIT AND CHAIN;
        SELECT v_task AS task;
    END IF;
END//
DELIMITER ;

-- The previous release's claim procedure (release 1, claim_next_<queue>),
-- which its workers keep calling during a rolling upgrade, becomes a call of
-- this release's: same arguments, result and version comment (those workers
-- check it at start), so they start and claim as before, but never take a
-- task of a processo with limits (they know nothing of limits), and skip a
-- task the unique index of running lock keys refuses instead of failing.
-- NULL handled subscribers and processos: every task, as that release claimed them
-- (and a NULL worker: that release names none);
-- one task per CALL, as that release claimed.
DROP PROCEDURE IF EXISTS public.claim_next_fila_teste;
DELIMITER //
CREATE PROCEDURE public.claim_next_fila_teste(
    IN p_task_id BIGINT,
    IN p_mensagem VARCHAR(500) CHARACTER SET utf8mb4,
    IN p_lock_prefix VARCHAR(64)
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT 'nsj_queue_lib claim d8ff69fda4465378'
BEGIN
    SET @nsjq_claim_limit = NULL;
    CALL public.claim_next_fila_teste_v2(p_task_id, p_mensagem, p_lock_prefix, NULL, NULL, NULL);
END//
DELIMITER ;

-- The limited claim (per-processo limits) replaces an earlier build of itself.
DROP PROCEDURE IF EXISTS public.claim_limited_fila_teste_v2;
-- The limited claim (per-processo limits, docs/flow-control.md) in one CALL,
-- the steps of PostgreSQL's limited_claim.sql (which says why each is there):
-- a look without locks for the processo whose next start comes first within
-- p_early_s; its limits row locked, its state read again after the lock
-- (READ COMMITTED for this transaction: each read takes a fresh snapshot);
-- SLEEP until the start is due; one ready task marked 'processando' (a task
-- the unique index of running lock keys refuses is skipped, up to
-- 3 times) and the processo's state moved on. With p_take_lock the
-- task's liveness lock is taken and the claim committed, the task's own
-- transaction opened (the executors' isolation level, REPEATABLE READ);
-- without it the claim's transaction stays open for the caller (the socket
-- server's lock comes first). Nothing claimed: the transaction is rolled back.
-- The CALL's one result set is one row: the task as JSON (NULL when none,
-- with liveness_locked), wait_s, limits_rows and stale_windows as on
-- PostgreSQL. p_open_windows and p_known_windows are JSON arrays of
-- MD5(processo, newline, time_windows).
DELIMITER //
CREATE PROCEDURE public.claim_limited_fila_teste_v2(
    IN p_open_windows LONGTEXT CHARACTER SET utf8mb4,
    IN p_known_windows LONGTEXT CHARACTER SET utf8mb4,
    IN p_early_s DOUBLE,
    IN p_take_lock BOOLEAN,
    IN p_lock_prefix VARCHAR(64),
    IN p_handled_processos LONGTEXT CHARACTER SET utf8mb4,
    IN p_worker VARCHAR(200) CHARACTER SET utf8mb4
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT 'nsj_queue_lib limited claim a87866bedc2a254c'
BEGIN
    DECLARE v_chosen VARCHAR(250) CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_locked VARCHAR(250) CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_due_in DOUBLE DEFAULT NULL;
    DECLARE v_due_at TIMESTAMP(6) DEFAULT NULL;
    DECLARE v_startable BOOLEAN DEFAULT FALSE;
    DECLARE v_claimed BIGINT DEFAULT NULL;
    DECLARE v_first_attempt BIGINT DEFAULT NULL;
    DECLARE v_task LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_attempt INT DEFAULT 0;
    DECLARE v_keys_lost BOOLEAN DEFAULT FALSE;
    DECLARE v_floor TIMESTAMP(6) DEFAULT NULL;
    DECLARE v_wait DOUBLE DEFAULT NULL;
    DECLARE v_rows BIGINT DEFAULT 0;
    DECLARE v_stale BOOLEAN DEFAULT FALSE;
    -- Nothing found: SELECT ... INTO assigns nothing, and that is no error here.
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    SELECT s.processo, s.due_in INTO v_chosen, v_due_in
    FROM (SELECT l.processo, NULLIF(GREATEST(IF(l.interval_min_s IS NULL OR l.next_start_at IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.next_start_at)), IF(l.rate_count IS NULL OR l.rate_tat IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.rate_tat)), IF(NOT l.breaker_open OR l.breaker_until IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.breaker_until))), -1e18) / 1e6 AS due_in, ((l.max_concurrent IS NOT NULL AND l.max_concurrent <= (SELECT count(*) FROM public.fila_teste AS r WHERE r.processo = l.processo AND r.status = 'processando')) OR (l.max_concurrent_per_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= NOW(6) AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open) AND (t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN (SELECT c.processo, c.fair_key FROM public.fila_teste AS c JOIN public.fila_teste_limits AS k ON k.processo = c.processo WHERE k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando' AND c.fair_key IS NOT NULL GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key HAVING count(*) >= k.max_concurrent_per_key))))) AS capped FROM public.fila_teste_limits AS l WHERE (l.time_windows IS NULL OR JSON_CONTAINS(p_open_windows, JSON_QUOTE(MD5(CONCAT(l.processo, CHAR(10), l.time_windows))))) AND (p_handled_processos IS NULL OR JSON_CONTAINS(p_handled_processos, JSON_QUOTE(l.processo))) AND ((l.max_concurrent IS NOT NULL OR l.rate_count IS NOT NULL OR l.interval_min_s IS NOT NULL OR l.time_windows IS NOT NULL OR l.max_concurrent_per_key IS NOT NULL) OR l.breaker_open) AND NOT (l.paused AND (l.paused_until IS NULL OR l.paused_until > UTC_TIMESTAMP(6))) AND NOT (l.breaker_open AND l.breaker_trial) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > UTC_TIMESTAMP(6)))) AND EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= NOW(6) AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open))) AS s
    WHERE NOT s.capped AND (s.due_in IS NULL OR s.due_in <= p_early_s)
    ORDER BY s.due_in IS NOT NULL, s.due_in, s.processo
    LIMIT 1;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    IF v_chosen IS NOT NULL THEN
        SELECT l.processo INTO v_locked FROM public.fila_teste_limits AS l WHERE l.processo = v_chosen FOR UPDATE;
        SET v_due_in = NULL;
        SELECT TRUE, s.due_in, TIMESTAMPADD(MICROSECOND, ROUND(1e6 * s.due_in), NOW(6))
        INTO v_startable, v_due_in, v_due_at
        FROM (SELECT l.processo, NULLIF(GREATEST(IF(l.interval_min_s IS NULL OR l.next_start_at IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.next_start_at)), IF(l.rate_count IS NULL OR l.rate_tat IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.rate_tat)), IF(NOT l.breaker_open OR l.breaker_until IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.breaker_until))), -1e18) / 1e6 AS due_in, ((l.max_concurrent IS NOT NULL AND l.max_concurrent <= (SELECT count(*) FROM public.fila_teste AS r WHERE r.processo = l.processo AND r.status = 'processando')) OR (l.max_concurrent_per_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= NOW(6) AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open) AND (t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN (SELECT c.processo, c.fair_key FROM public.fila_teste AS c JOIN public.fila_teste_limits AS k ON k.processo = c.processo WHERE k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando' AND c.fair_key IS NOT NULL GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key HAVING count(*) >= k.max_concurrent_per_key))))) AS capped FROM public.fila_teste_limits AS l WHERE (l.time_windows IS NULL OR JSON_CONTAINS(p_open_windows, JSON_QUOTE(MD5(CONCAT(l.processo, CHAR(10), l.time_windows))))) AND (p_handled_processos IS NULL OR JSON_CONTAINS(p_handled_processos, JSON_QUOTE(l.processo))) AND ((l.max_concurrent IS NOT NULL OR l.rate_count IS NOT NULL OR l.interval_min_s IS NOT NULL OR l.time_windows IS NOT NULL OR l.max_concurrent_per_key IS NOT NULL) OR l.breaker_open) AND NOT (l.paused AND (l.paused_until IS NULL OR l.paused_until > UTC_TIMESTAMP(6))) AND NOT (l.breaker_open AND l.breaker_trial) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > UTC_TIMESTAMP(6)))) AND EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= NOW(6) AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open))) AS s
        WHERE s.processo = v_chosen AND NOT s.capped AND (s.due_in IS NULL OR s.due_in <= p_early_s);
    END IF;
    IF v_startable THEN
        IF v_due_in > 0 THEN
            -- To the due moment itself: this statement starts a little after the
            -- one that measured v_due_in.
            DO SLEEP(GREATEST(TIMESTAMPDIFF(MICROSECOND, NOW(6), v_due_at), 0) / 1e6);
        END IF;
        claim: LOOP
            SET v_attempt = v_attempt + 1, v_claimed = NULL, v_keys_lost = FALSE;
            SELECT t.id, IF(t.payload IS NULL, t.id_inicial, NULL), JSON_OBJECT('id', t.id, 'id_inicial', t.id_inicial, 'data_hora_inicial', t.data_hora_inicial, 'data_hora', t.data_hora, 'origem', t.origem, 'destino', t.destino, 'processo', t.processo, 'chave_externa', t.chave_externa, 'proxima_tentativa', t.proxima_tentativa, 'tentativa', t.tentativa, 'status', 'processando', 'reenfileirado', t.reenfileirado, 'estouro_tentativas', t.estouro_tentativas, 'mensagem', t.mensagem, 'id_anterior', t.id_anterior, 'data_hora_anterior', t.data_hora_anterior, 'status_anterior', t.status_anterior, 'mensagem_anterior', t.mensagem_anterior, 'payload', t.payload, 'tenant', t.tenant, 'grupo_empresarial', t.grupo_empresarial, 'payload_hash', HEX(t.payload_hash), 'pub_sub', t.pub_sub, 'publication_id', t.publication_id, 'subscriber_id', t.subscriber_id, 'dead', t.dead, 'live_id', t.live_id, 'prioridade', t.prioridade, 'trace_context', t.trace_context, 'max_retry', t.max_retry, 'timeout_s', t.timeout_s, 'next_try_priority', t.next_try_priority, 'lock_key', t.lock_key)
            INTO v_claimed, v_first_attempt, v_task
            FROM public.fila_teste AS t
            WHERE t.processo = v_chosen AND t.status = 'pendente' AND t.data_hora <= NOW(6)
              AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND EXISTS (SELECT 1 FROM public.fila_teste_limits AS b WHERE b.processo = t.processo AND b.breaker_open)) AND (t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN (SELECT c.processo, c.fair_key FROM public.fila_teste AS c JOIN public.fila_teste_limits AS k ON k.processo = c.processo WHERE k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando' AND c.fair_key IS NOT NULL GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key HAVING count(*) >= k.max_concurrent_per_key))
            ORDER BY t.prioridade DESC, t.data_hora, t.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
            IF v_claimed IS NULL THEN
                LEAVE claim;
            END IF;
            BEGIN
                DECLARE CONTINUE HANDLER FOR 1062 SET v_keys_lost = TRUE;
                UPDATE public.fila_teste
                SET status = 'processando', started_at = NOW(6), worker = p_worker
                WHERE id = v_claimed;
            END;
            IF NOT v_keys_lost THEN
                LEAVE claim;
            END IF;
            SET v_claimed = NULL, v_task = NULL;
            IF v_attempt >= 3 THEN
                LEAVE claim;
            END IF;
        END LOOP;
    END IF;
    IF v_claimed IS NOT NULL THEN
        -- The rate limiter's credit: at most 0.08 of the period behind this start.
        SELECT TIMESTAMPADD(MICROSECOND, -ROUND(1e6 * 0.08 * l.rate_period_s), NOW(6))
        INTO v_floor
        FROM public.fila_teste_limits AS l WHERE l.processo = v_chosen;
        UPDATE public.fila_teste_limits AS l
        SET l.next_start_at = IF(l.interval_min_s IS NULL, l.next_start_at,
                TIMESTAMPADD(MICROSECOND,
                             ROUND(1e6 * (l.interval_min_s + RAND() * (l.interval_max_s - l.interval_min_s))),
                             NOW(6))),
            l.rate_tat = IF(l.rate_count IS NULL, l.rate_tat,
                TIMESTAMPADD(MICROSECOND, ROUND(1e6 * l.rate_period_s / l.rate_count),
                             IF(l.rate_tat IS NOT NULL AND l.rate_tat > v_floor, l.rate_tat, v_floor))),
            -- An open circuit breaker's task is its trial: no other starts until it is
            -- decided. Its id and start let only its outcome decide, and let a trial
            -- whose outcome never came be told (fleet/breaker_recorder.py).
            l.breaker_trial_at = IF(l.breaker_open, NOW(6), NULL),
            l.breaker_trial_task = IF(l.breaker_open, v_claimed, NULL),
            l.breaker_trial = l.breaker_open
        WHERE l.processo = v_chosen;
        IF v_first_attempt IS NOT NULL THEN
            SET v_task = JSON_SET(v_task, '$.payload',
                                  (SELECT f.payload FROM public.fila_teste AS f WHERE f.id = v_first_attempt));
        END IF;
        SET v_task = JSON_SET(v_task, '$.liveness_locked',
                              IF(p_take_lock, GET_LOCK(CONCAT(p_lock_prefix, v_claimed), 0), NULL));
    END IF;
    -- Read before the commit: the task's own transaction takes its snapshot
    -- at its handler's first read.
    SELECT MIN(IF(s.capped, 1.0, GREATEST(COALESCE(s.due_in, 0), 0))) INTO v_wait
    FROM (SELECT l.processo, NULLIF(GREATEST(IF(l.interval_min_s IS NULL OR l.next_start_at IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.next_start_at)), IF(l.rate_count IS NULL OR l.rate_tat IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.rate_tat)), IF(NOT l.breaker_open OR l.breaker_until IS NULL, -1e18, TIMESTAMPDIFF(MICROSECOND, NOW(6), l.breaker_until))), -1e18) / 1e6 AS due_in, ((l.max_concurrent IS NOT NULL AND l.max_concurrent <= (SELECT count(*) FROM public.fila_teste AS r WHERE r.processo = l.processo AND r.status = 'processando')) OR (l.max_concurrent_per_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= NOW(6) AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open) AND (t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN (SELECT c.processo, c.fair_key FROM public.fila_teste AS c JOIN public.fila_teste_limits AS k ON k.processo = c.processo WHERE k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando' AND c.fair_key IS NOT NULL GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key HAVING count(*) >= k.max_concurrent_per_key))))) AS capped FROM public.fila_teste_limits AS l WHERE (l.time_windows IS NULL OR JSON_CONTAINS(p_open_windows, JSON_QUOTE(MD5(CONCAT(l.processo, CHAR(10), l.time_windows))))) AND (p_handled_processos IS NULL OR JSON_CONTAINS(p_handled_processos, JSON_QUOTE(l.processo))) AND ((l.max_concurrent IS NOT NULL OR l.rate_count IS NOT NULL OR l.interval_min_s IS NOT NULL OR l.time_windows IS NOT NULL OR l.max_concurrent_per_key IS NOT NULL) OR l.breaker_open) AND NOT (l.paused AND (l.paused_until IS NULL OR l.paused_until > UTC_TIMESTAMP(6))) AND NOT (l.breaker_open AND l.breaker_trial) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > UTC_TIMESTAMP(6)))) AND EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= NOW(6) AND (t.lock_key IS NULL OR ((SELECT held.id FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.lock_key_status = 'pendente' AND head.data_hora <= NOW(6) ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open))) AS s;
    SELECT COUNT(*) INTO v_rows FROM public.fila_teste_limits;
    SELECT EXISTS (SELECT 1 FROM public.fila_teste_limits AS l
                   WHERE l.time_windows IS NOT NULL
                     AND NOT JSON_CONTAINS(p_known_windows,
                                           JSON_QUOTE(MD5(CONCAT(l.processo, CHAR(10), l.time_windows)))))
    INTO v_stale;
    IF v_claimed IS NULL THEN
        ROLLBACK;
    ELSEIF p_take_lock THEN
        COMMIT;
        START TRANSACTION;
    END IF;
    SELECT v_task AS task, v_wait AS wait_s, v_rows AS limits_rows, v_stale AS stale_windows;
END//
DELIMITER ;
