CREATE TABLE {if_not_exists}{subscriber_table} (
    id varchar(100) NOT NULL PRIMARY KEY,
    tenant bigint,
    grupo_empresarial varchar(40),
    processo varchar(250) NOT NULL,
    url varchar(2048),
    http_method varchar(8),
    headers json,
    ativo boolean NOT NULL DEFAULT true,
    created_at timestamp with time zone NOT NULL DEFAULT now()
);
