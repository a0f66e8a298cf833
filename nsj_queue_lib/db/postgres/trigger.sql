-- Tells the workers listening on channel '{channel}' about a new task: payload
-- '' when it is ready now, 'scheduled' when it is due later (they then re-plan
-- their next wake-up). Delivered at commit; identical notifications are merged.
CREATE OR REPLACE FUNCTION {function}()
RETURNS trigger AS $$
BEGIN
    IF NEW.data_hora <= clock_timestamp() AND NEW.status = 'pendente' THEN
        PERFORM pg_notify('{channel}', '');
    ELSE
        PERFORM pg_notify('{channel}', 'scheduled');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS {trigger_name} ON {table};
CREATE TRIGGER {trigger_name}
AFTER INSERT ON {table}
FOR EACH ROW
WHEN (NEW.status IN ('pendente', 'agendada'))
EXECUTE FUNCTION {function}();
