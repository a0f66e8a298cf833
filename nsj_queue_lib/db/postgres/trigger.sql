-- Wakes the workers listening on channel '{channel}' when a task that is ready now is inserted.
-- The notification is delivered at commit and identical ones are merged.
CREATE OR REPLACE FUNCTION {function}()
RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{channel}', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS {trigger_name} ON {table};
CREATE TRIGGER {trigger_name}
AFTER INSERT ON {table}
FOR EACH ROW
WHEN (NEW.status = 'pendente' AND NEW.data_hora <= clock_timestamp())
EXECUTE FUNCTION {function}();
