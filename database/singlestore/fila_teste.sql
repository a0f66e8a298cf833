-- Queue table (SingleStore): a rowstore table, as the queue is many small
-- updates and point reads, sharded by id.
-- SingleStore has no SKIP LOCKED and no named locks (GET_LOCK): workers
-- claim with a conditional update and take their locks from the socket server
-- (CLIENT_SERVER_MODE=true). Times are DATETIME(6) in the cluster's time zone
-- (SingleStore has one time zone per cluster; UTC is recommended).
-- Text compares byte for byte (utf8mb4_bin), as on PostgreSQL.
CREATE ROWSTORE TABLE public.fila_teste (
    id bigint NOT NULL AUTO_INCREMENT,
    id_inicial bigint,
    data_hora_inicial datetime(6) DEFAULT CURRENT_TIMESTAMP(6),
    data_hora datetime(6) DEFAULT CURRENT_TIMESTAMP(6),
    origem varchar(150),
    destino varchar(150),
    processo varchar(250),
    chave_externa varchar(100),
    proxima_tentativa datetime(6),
    tentativa integer DEFAULT 1,
    status varchar(100) DEFAULT 'pendente',
    reenfileirado boolean DEFAULT false,
    estouro_tentativas boolean DEFAULT false,
    mensagem varchar(500),
    id_anterior bigint,
    data_hora_anterior datetime(6),
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
    -- Life cycle (docs/lifecycle.md).
    cancel_requested boolean NOT NULL DEFAULT false,
    progress_done bigint,
    progress_total bigint,
    progress_message varchar(500),
    -- Carried by retries like on MySQL; inserting with a dedupe_key or a lock_key
    -- is refused on SingleStore (no unique key without the shard key id, and
    -- its claim does not look at lock keys).
    dedupe_key varchar(200),
    lock_key varchar(200),
    -- The attempt's timeline (docs/reference/queue-table.md).
    started_at datetime(6),
    finished_at datetime(6),
    worker varchar(200),
    -- The enqueuing code's W3C trace context (docs/integrations/opentelemetry.md);
    -- NULL without OpenTelemetry. Carried by retries and dead letters.
    trace_context varchar(512),
    -- The task's own overrides, given at enqueue (docs/fleet-control.md): NULL means
    -- the @Task option, else the queue's default. Carried by retries.
    max_retry integer,
    timeout_s double,
    next_try_priority integer,
    -- Fair shares are refused on SingleStore (docs/fleet-control.md); the column keeps
    -- the logical table the same everywhere.
    fair_key varchar(200),
    PRIMARY KEY (id),
    SHARD KEY (id),
    -- The claim: ready rows in claim order (rowstore skiplists are read in
    -- one direction, so the index carries the DESC of the claim order).
    KEY idx_fila_teste_claim (status, prioridade DESC, data_hora, id),
    -- Rows of one status by time: next wake-up, due retries, running rows.
    KEY idx_fila_teste_due (status, data_hora),
    -- Purge: oldest rows first.
    KEY idx_fila_teste_data_hora (data_hora),
    -- Purge keeps a first attempt while a later attempt still needs its payload.
    KEY idx_fila_teste_chain (id_inicial, status),
    -- QueueClient.list_equivalent_task.
    KEY idx_fila_teste_equivalent (chave_externa, payload_hash, status)
) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Subscribers of pub/sub and webhook publications.
CREATE ROWSTORE TABLE public.fila_teste_subscriber (
    id varchar(100) NOT NULL,
    tenant bigint,
    grupo_empresarial varchar(40),
    processo varchar(250) NOT NULL,
    url varchar(2048),
    http_method varchar(8),
    headers json,
    ativo boolean NOT NULL DEFAULT true,
    created_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    KEY idx_fila_teste_subscriber_processo (processo, tenant, grupo_empresarial)
) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The workers running on the queue and the processos each claims (nsjq status).
CREATE ROWSTORE TABLE public.fila_teste_workers (
    worker varchar(200) NOT NULL,
    processos longtext,
    started_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    seen_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (worker)
) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Periodic tasks (docs/periodic-tasks.md): the latest slot enqueued per processo.
CREATE ROWSTORE TABLE public.fila_teste_periodic (
    processo varchar(250) NOT NULL,
    last_slot bigint NOT NULL,
    task_id bigint,
    updated_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (processo)
) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
