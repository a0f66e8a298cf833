-- Queue table: one row per attempt of a task.
CREATE TABLE {table} (
    {id_column},
    id_inicial bigint,
    data_hora_inicial timestamp with time zone DEFAULT clock_timestamp(),
    data_hora timestamp with time zone DEFAULT clock_timestamp(),
    origem varchar(150),
    destino varchar(150),
    processo varchar(250),
    chave_externa varchar(100),
    proxima_tentativa timestamp with time zone,
    tentativa integer DEFAULT 1,
    status varchar(100) DEFAULT 'pendente',
    reenfileirado boolean DEFAULT false,
    estouro_tentativas boolean DEFAULT false,
    mensagem varchar(500),
    id_anterior bigint,
    data_hora_anterior timestamp with time zone,
    status_anterior varchar(100),
    mensagem_anterior varchar(500),
    payload text,
    tenant bigint,
    grupo_empresarial varchar(40),
    payload_hash bytea,
    pub_sub boolean DEFAULT false NOT NULL,
    publication_id bigint,
    subscriber_id varchar(100),
    dead boolean DEFAULT false NOT NULL,
    live_id bigint,
    prioridade integer DEFAULT 50,
    -- Life cycle (docs/lifecycle.md): nullable or defaulted, so that statements
    -- that never name them (1.2.2's workers) keep working.
    cancel_requested boolean DEFAULT false NOT NULL,
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
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    worker varchar(200),
    -- The enqueuing code's W3C trace context (docs/integrations/opentelemetry.md);
    -- NULL without OpenTelemetry. Carried by retries and dead letters.
    trace_context varchar(512),
    -- The task's own overrides, given at enqueue (docs/fleet-control.md): NULL means
    -- the @Task option, else the queue's default. Carried by retries.
    max_retry integer,
    timeout_s double precision,
    next_try_priority integer,
    -- The task's fair key (docs/fleet-control.md): claims rotate across fair keys
    -- among ready tasks of one prioridade. Carried by retries.
    fair_key varchar(200){partition_key}
){partition_by};
{partitions}
