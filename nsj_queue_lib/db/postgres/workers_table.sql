-- The workers running on the queue (issue 37): each writes its row at start and
-- every heartbeat, with the processos it claims (a JSON array; NULL: every
-- processo), and deletes it when it stops. nsjq status names the ready
-- processos no live worker claims.
CREATE TABLE {if_not_exists}{workers_table} (
    worker varchar(200) NOT NULL PRIMARY KEY,
    processos text,
    started_at timestamp with time zone NOT NULL DEFAULT clock_timestamp(),
    seen_at timestamp with time zone NOT NULL DEFAULT clock_timestamp()
);
