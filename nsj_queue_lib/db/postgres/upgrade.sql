-- Brings a queue created by nsj-queue-lib 1.2.2 (or an earlier run of this
-- script) to the current schema. Every statement is idempotent.
{layout_check}

ALTER TABLE {table} ADD COLUMN IF NOT EXISTS prioridade integer DEFAULT 50;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS dead boolean DEFAULT false NOT NULL;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS live_id bigint;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS pub_sub boolean DEFAULT false NOT NULL;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS publication_id bigint;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS subscriber_id varchar(100);
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS cancel_requested boolean DEFAULT false NOT NULL;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS progress_done bigint;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS progress_total bigint;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS progress_message varchar(500);
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS dedupe_key varchar(200);
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS lock_key varchar(200);
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS started_at timestamp with time zone;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS finished_at timestamp with time zone;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS worker varchar(200);
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS trace_context varchar(512);
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS max_retry integer;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS timeout_s double precision;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS next_try_priority integer;
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS fair_key varchar(200);

{autovacuum}

-- Indexes whose definition changed since: the purge index on data_hora is
-- partial now (1.2.2's covered every row), the chain index leaves first
-- attempts out, the index of running lock keys is unique, and the equivalent-task
-- index holds chave_externa alone (it held payload_hash and status too). An index
-- with the old definition is dropped here so that the CREATE INDEX IF NOT EXISTS
-- below builds the current one.
DO $$
DECLARE
    stale record;
BEGIN
    FOR stale IN
        SELECT i.indexrelid::regclass AS name
        FROM pg_index AS i
        WHERE (i.indexrelid = to_regclass('{schema}.{idx_data_hora}') AND i.indpred IS NULL)
           OR (i.indexrelid = to_regclass('{schema}.{idx_chain}')
               AND coalesce(pg_get_expr(i.indpred, i.indrelid), '') NOT LIKE '%id_inicial IS NOT NULL%')
           OR (i.indexrelid = to_regclass('{schema}.{idx_lock_key_running}') AND NOT i.indisunique)
           OR (i.indexrelid = to_regclass('{schema}.{idx_equivalent}') AND i.indnatts <> 1)
    LOOP
        EXECUTE format('DROP INDEX %s', stale.name);
    END LOOP;
END
$$;

{indexes}

{trigger}

{workflow_ddl}
-- The edges' settled flag came after the first builds of dependencies between
-- tasks; their edges count as unsettled.
ALTER TABLE {parents_table} ADD COLUMN IF NOT EXISTS settled boolean NOT NULL DEFAULT false;
-- The counts' slots came later: an edge written before them counts in slot 0, as
-- its child's one count does (the release reads the slot from the edge).
ALTER TABLE {parents_table} ADD COLUMN IF NOT EXISTS slot smallint NOT NULL DEFAULT 0;
ALTER TABLE {waiting_table} ADD COLUMN IF NOT EXISTS slot smallint NOT NULL DEFAULT 0;
DO $$
DECLARE
    key_name name;
BEGIN
    SELECT c.conname INTO key_name
    FROM pg_constraint AS c
    WHERE c.conrelid = '{waiting_table}'::regclass AND c.contype = 'p'
      AND NOT EXISTS (
          SELECT 1 FROM pg_attribute AS a
          WHERE a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey) AND a.attname = 'slot'
      );
    IF key_name IS NOT NULL THEN
        EXECUTE format('ALTER TABLE {waiting_table} DROP CONSTRAINT %I', key_name);
        ALTER TABLE {waiting_table} ADD PRIMARY KEY (child_id, slot);
    END IF;
END;
$$;

-- This release's claim function as its first builds declared it, before it took
-- the handled processos and then the worker's name (never released): gone, so
-- that one signature remains.
DROP FUNCTION IF EXISTS {claim_function}(bigint, text, integer, integer, integer, varchar[]);
DROP FUNCTION IF EXISTS {claim_function}(bigint, text, integer, integer, integer, varchar[], varchar[]);

-- The claim function of this release (claim_next_<queue>_v<N>). Earlier releases'
-- functions stay, for their workers during a rolling upgrade: db_gen
-- --drop-old-routines drops them afterwards.
{claim_function_ddl}

{previous_claim_ddl}

{subscriber_table_ddl}
{subscriber_indexes}
-- The subscribers' circuit breakers (docs/fleet-control.md).
ALTER TABLE {subscriber_table} ADD COLUMN IF NOT EXISTS circuit_breaker_failures integer;
ALTER TABLE {subscriber_table} ADD COLUMN IF NOT EXISTS circuit_breaker_cool_down_s double precision;
ALTER TABLE {subscriber_table} ADD COLUMN IF NOT EXISTS breaker_failures integer NOT NULL DEFAULT 0;
ALTER TABLE {subscriber_table} ADD COLUMN IF NOT EXISTS breaker_open boolean NOT NULL DEFAULT false;
ALTER TABLE {subscriber_table} ADD COLUMN IF NOT EXISTS breaker_until timestamp with time zone;
ALTER TABLE {subscriber_table} ADD COLUMN IF NOT EXISTS breaker_trial boolean NOT NULL DEFAULT false;
ALTER TABLE {subscriber_table} ADD COLUMN IF NOT EXISTS breaker_trial_at timestamp with time zone;
ALTER TABLE {subscriber_table} ADD COLUMN IF NOT EXISTS breaker_trial_task bigint;

{periodic_table_ddl}
{workers_table_ddl}
{limits_table_ddl}
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false;
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS paused_until timestamp with time zone;
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS breaker_failures integer NOT NULL DEFAULT 0;
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS breaker_open boolean NOT NULL DEFAULT false;
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS breaker_until timestamp with time zone;
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS breaker_trial boolean NOT NULL DEFAULT false;
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS breaker_trial_at timestamp with time zone;
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS breaker_trial_task bigint;
ALTER TABLE {limits_table} ADD COLUMN IF NOT EXISTS max_concurrent_per_key integer;

-- The limited claim: the start of a task of a processo with limits (its first
-- builds' signatures, before it took the handled processos and then the worker's
-- name, dropped first).
DROP FUNCTION IF EXISTS {limited_claim}(text[], text[], double precision, boolean, integer);
DROP FUNCTION IF EXISTS {limited_claim}(text[], text[], double precision, boolean, integer, varchar[]);
{limited_claim_ddl}
