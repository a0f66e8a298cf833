-- Tells the workers listening on channel '{channel}' about new tasks: payload
-- '' when one is ready now, 'scheduled' when one is due later (they then re-plan
-- their next wake-up). Delivered at commit; identical notifications are merged.
-- Once per INSERT statement, over the rows it added: a bulk insert pays for
-- one call instead of one per row (docs/benchmarks.md).
CREATE OR REPLACE FUNCTION {function}()
RETURNS trigger AS $$
DECLARE
    now timestamptz := clock_timestamp();
BEGIN
    IF EXISTS (
        SELECT 1 FROM new_tasks WHERE status = 'pendente' AND data_hora <= now
    ) THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    IF EXISTS (
        SELECT 1 FROM new_tasks
        WHERE status = 'agendada'
           OR (status = 'pendente' AND (data_hora IS NULL OR data_hora > now))
    ) THEN
        PERFORM pg_notify('{channel}', 'scheduled');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS {trigger_name} ON {table};
CREATE TRIGGER {trigger_name}
AFTER INSERT ON {table}
REFERENCING NEW TABLE AS new_tasks
FOR EACH STATEMENT
EXECUTE FUNCTION {function}();
