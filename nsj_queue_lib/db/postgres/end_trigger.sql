-- wait_for_task's wake-up (nsj_queue_lib/workflow/waiting.py): the end of a task
-- someone waits for is told on channel '{end_channel}', its payload the task's
-- first attempt's id. A waiter says it waits by holding a shared advisory lock,
-- ({end_lock_key}, the id's low 31 bits), while it waits: an end no one waits
-- for costs a try-lock and no NOTIFY (a NOTIFY serializes the commits of the
-- transactions that send one, which the workers' settles must not pay for).
-- Only rows whose status becomes an end fire it (the WHEN clause, checked
-- without calling the function); a failure with a retry ahead wakes the waiter
-- for nothing, and it waits on.
CREATE OR REPLACE FUNCTION {end_function}()
RETURNS trigger
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    first_id bigint := coalesce(NEW.id_inicial, NEW.id);
    task_key integer := (first_id % 2147483648)::integer;
BEGIN
    IF pg_try_advisory_lock({end_lock_key}, task_key) THEN
        PERFORM pg_advisory_unlock({end_lock_key}, task_key);
    ELSE
        PERFORM pg_notify('{end_channel}', first_id::text);
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS {end_trigger} ON {table};
CREATE TRIGGER {end_trigger}
AFTER UPDATE OF status ON {table}
FOR EACH ROW
WHEN (NEW.status IN ('sucesso', 'cancelada', 'falha', 'falha_processando'))
EXECUTE FUNCTION {end_function}();
