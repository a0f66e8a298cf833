-- Queue table: one row per attempt of a task (MySQL >= 8.0, MariaDB >= 10.6).
-- Times are TIMESTAMP(6): instants kept in UTC, read and written in the
-- session's time zone (the workers' sessions use UTC). TIMESTAMP ends at
-- 2038-01-19 03:14:07 UTC. Text compares byte for byte (utf8mb4_bin), as
-- on PostgreSQL.
{server_check}

CREATE TABLE {table} (
    {id_column},
    id_inicial bigint,
    data_hora_inicial timestamp(6) NULL DEFAULT CURRENT_TIMESTAMP(6),
    data_hora timestamp(6) NULL DEFAULT CURRENT_TIMESTAMP(6),
    origem varchar(150),
    destino varchar(150),
    processo varchar(250),
    chave_externa varchar(100),
    proxima_tentativa timestamp(6) NULL DEFAULT NULL,
    tentativa integer DEFAULT 1,
    status varchar(100) DEFAULT 'pendente',
    reenfileirado boolean DEFAULT false,
    estouro_tentativas boolean DEFAULT false,
    mensagem varchar(500),
    id_anterior bigint,
    data_hora_anterior timestamp(6) NULL DEFAULT NULL,
    status_anterior varchar(100),
    mensagem_anterior varchar(500),
    payload longtext,
    tenant bigint,
    grupo_empresarial varchar(40),
    payload_hash varbinary(64),
    pub_sub boolean NOT NULL DEFAULT false,
    publication_id bigint,
    subscriber_id varchar(100),
    dead boolean NOT NULL DEFAULT false,
    live_id bigint,
    prioridade integer DEFAULT 50,
    -- Life cycle (docs/lifecycle.md): nullable or defaulted, so that statements
    -- that never name them (1.2.2's workers) keep working.
    cancel_requested boolean NOT NULL DEFAULT false,
    progress_done bigint,
    progress_total bigint,
    progress_message varchar(500),
    -- Flow control (docs/flow-control.md): at most one unfinished task per dedupe_key.
    dedupe_key varchar(200),
    -- Tasks with equal lock_key never run at the same time (docs/flow-control.md).
    lock_key varchar(200),
    -- The attempt's timeline (docs/reference/queue-table.md): when a worker claimed
    -- it, which worker (its workers table name), and when it ended, by the
    -- database's clock. NULL while it waits, and on rows 1.2.2's workers wrote.
    started_at timestamp(6) NULL DEFAULT NULL,
    finished_at timestamp(6) NULL DEFAULT NULL,
    worker varchar(200),
    -- The enqueuing code's W3C trace context (docs/integrations/opentelemetry.md);
    -- NULL without OpenTelemetry. Carried by retries and dead letters.
    trace_context varchar(512),
    -- The task's own overrides, given at enqueue (docs/fleet-control.md): NULL means
    -- the @Task option, else the queue's default. Carried by retries.
    max_retry integer,
    timeout_s double,
    next_try_priority integer,
    -- The task's fair key (docs/fleet-control.md): claims rotate across fair keys
    -- among ready tasks of one prioridade. Carried by retries.
    fair_key varchar(200),
    -- dedupe_key while the task is unfinished, NULL once it is: MySQL has no partial
    -- index, and a unique index admits any number of NULLs.
    dedupe_active varchar(200) GENERATED ALWAYS AS (CASE WHEN status IN ('pendente', 'agendada', 'processando') THEN dedupe_key END) VIRTUAL,
    -- lock_key while the task runs, NULL otherwise: its unique index admits one
    -- running task per key, whatever the claims' snapshots saw.
    lock_key_running varchar(200) GENERATED ALWAYS AS (CASE WHEN status = 'processando' THEN lock_key END) VIRTUAL,
    -- status of a keyed task, NULL on an unkeyed one: the key index holds this
    -- instead of status, so that the two status changes of an unkeyed task
    -- (claim, outcome) leave that index alone (indexes.sql).
    lock_key_status varchar(100) GENERATED ALWAYS AS (CASE WHEN lock_key IS NOT NULL THEN status END) VIRTUAL,
    -- status of a task with a fair key, NULL on others: the fair key index holds this
    -- instead of status, as the lock key index does (indexes.sql).
    fair_key_status varchar(100) GENERATED ALWAYS AS (CASE WHEN fair_key IS NOT NULL THEN status END) VIRTUAL{partition_key}
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin{partition_by};
{partitions}
{indexes}

-- No trigger: MySQL has no NOTIFY. Workers poll, or the socket server wakes them.

{workflow_ddl}

{claim_procedure_ddl}

-- Subscribers of pub/sub and webhook publications.
{subscriber_table_ddl}
{subscriber_indexes}

{periodic_table_ddl}

{workers_table_ddl}

-- The limited claim: the start of a task of a processo with limits.
{limited_claim_ddl}
