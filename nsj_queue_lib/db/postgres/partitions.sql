-- The partitioned layout (db_gen --layout partitioned; docs/internals/storage.md):
-- the queue's name is a table partitioned by finished_day. Unfinished attempts
-- (finished_day 1) sit in {hot_partition}, whose size follows the backlog;
-- each attempt that ends moves to the partition of the UTC day it ended
-- (days since 1970-01-01), which retention drops whole. No default partition:
-- adding a day would then lock the hot rows, and DETACH CONCURRENTLY refuses.
CREATE TABLE {hot_partition} PARTITION OF {table} FOR VALUES FROM (1) TO (2);

-- Yesterday to {days_ahead} days ahead; the workers' purge service keeps adding
-- days ahead and drops those past QUEUE_PURGE_MAX_AGE.
DO $$
DECLARE
    today integer := (clock_timestamp() AT TIME ZONE 'UTC')::date - DATE '1970-01-01';
BEGIN
    FOR day IN today - 1 .. today + {days_ahead} LOOP
        EXECUTE format('CREATE TABLE IF NOT EXISTS %s PARTITION OF {table} FOR VALUES FROM (%s) TO (%s)',
                       '{table}_p' || day, day, day + 1);
    END LOOP;
END
$$;

-- An attempt's finished_day follows its status, whoever updates it: this
-- library's statements set it themselves where they are hot (the claim and
-- settle functions), and the WHEN clause then skips the trigger; 1.2.2's
-- workers, the other statements and SQL by hand leave it to the trigger. The
-- new key moves the row to its partition.
CREATE OR REPLACE FUNCTION {day_function}()
RETURNS trigger AS $$
BEGIN
    NEW.finished_day := CASE
        WHEN NEW.status IN ('pendente', 'agendada', 'processando', 'aguardando') THEN 1
        ELSE (coalesce(NEW.finished_at, clock_timestamp()) AT TIME ZONE 'UTC')::date - DATE '1970-01-01'
    END;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER {day_trigger}
BEFORE UPDATE ON {table}
FOR EACH ROW
WHEN ((NEW.status IN ('pendente', 'agendada', 'processando', 'aguardando')) IS DISTINCT FROM (NEW.finished_day = 1))
EXECUTE FUNCTION {day_function}();
