CREATE TABLE {if_not_exists}{subscriber_table} (
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
