-- Queue table: one row per attempt of a task (MySQL >= 8.0, MariaDB >= 10.6).
-- Times are TIMESTAMP(6): instants kept in UTC, read and written in the
-- session's time zone (the workers' sessions use UTC). TIMESTAMP ends at
-- 2038-01-19 03:14:07 UTC. Text compares byte for byte (utf8mb4_bin), as
-- on PostgreSQL.
CREATE TABLE public.fila_teste (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
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
    prioridade integer DEFAULT 50
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- MySQL has no partial indexes: status leads every index the workers use,
-- so each scan reads only the rows of the status it looks for.
-- The claim: ready rows in claim order (higher priority first, then older),
-- read in index order up to the LIMIT, without sorting.
CREATE INDEX idx_fila_teste_claim ON public.fila_teste (status, prioridade DESC, data_hora, id);
-- Rows of one status by time: the next wake-up, due retries, waiting tasks,
-- and the retry service's scan of running rows.
CREATE INDEX idx_fila_teste_due ON public.fila_teste (status, data_hora);
-- Purge: oldest rows first.
CREATE INDEX idx_fila_teste_data_hora ON public.fila_teste (data_hora);
-- Purge keeps a first attempt while a later attempt still needs its payload.
CREATE INDEX idx_fila_teste_chain ON public.fila_teste (id_inicial, status);
-- QueueClient.list_equivalent_task.
CREATE INDEX idx_fila_teste_equivalent ON public.fila_teste (chave_externa, payload_hash, status);

-- No trigger: MySQL has no NOTIFY. Workers poll, or the socket server wakes them.

-- Subscribers of pub/sub and webhook publications.
CREATE TABLE public.fila_teste_subscriber (
    id varchar(100) NOT NULL PRIMARY KEY,
    tenant bigint,
    grupo_empresarial varchar(40),
    processo varchar(250) NOT NULL,
    url varchar(2048),
    http_method varchar(8),
    headers json,
    ativo boolean NOT NULL DEFAULT true,
    created_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE INDEX idx_fila_teste_subscriber_processo ON public.fila_teste_subscriber (processo, tenant, grupo_empresarial);
