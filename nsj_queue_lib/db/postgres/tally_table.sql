-- Counts of the queue's finished attempts (nsjq status; db/tally.py): the tally
-- service folds the attempts in order of id, per hour of data_hora (hours since
-- 1970-01-01 UTC), processo ('' for none) and status, so that status reads the
-- backlog, this table and the attempts since the last fold instead of the whole
-- history. Attempts unfinished when their ids were folded wait in the open
-- table until they end; the state table says how far the ids are folded.
CREATE TABLE {if_not_exists}{tally_table} (
    hour bigint NOT NULL,
    processo varchar(250) NOT NULL,
    status varchar(100) NOT NULL,
    tasks bigint NOT NULL,
    failed bigint NOT NULL,
    dead bigint NOT NULL,
    PRIMARY KEY (hour, processo, status)
);
CREATE TABLE {if_not_exists}{tally_open_table} (
    id bigint NOT NULL PRIMARY KEY
);
CREATE TABLE {if_not_exists}{tally_state_table} (
    id integer NOT NULL PRIMARY KEY CHECK (id = 1),
    folded_to bigint NOT NULL,
    seen bigint NOT NULL,
    folded_at timestamp with time zone
);
