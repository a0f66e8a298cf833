-- wait_for_task's wake-up (nsj_queue_lib/workflow/waiting.py): the end of a task
-- someone waits for is told on channel '{end_channel}', its payload the task's
-- first attempt's id. A waiter says it waits by holding a shared advisory lock,
-- ({end_lock_key}, the id's low 31 bits), while it waits. The trigger's WHEN
-- clause asks, for each row whose status becomes an end: it takes that lock
-- and lets it go at once when no one holds it (the usual case: no event is
-- queued, no function called, no NOTIFY sent), and fires when it cannot, i.e.
-- when someone waits. A NOTIFY serializes the commits of the transactions that
-- send one: the workers' settles must not pay for it, nor for a function call,
-- on every task. The CASEs fix the order of the calls. A failure with a retry
-- ahead wakes the waiter for nothing, and it waits on.
CREATE OR REPLACE FUNCTION {end_function}()
RETURNS trigger
LANGUAGE plpgsql
SET jit = off
AS $$
BEGIN
    PERFORM pg_notify('{end_channel}', coalesce(NEW.id_inicial, NEW.id)::text);
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS {end_trigger} ON {table};
CREATE TRIGGER {end_trigger}
AFTER UPDATE OF status ON {table}
FOR EACH ROW
WHEN (CASE WHEN NEW.status IN ('sucesso', 'cancelada', 'falha', 'falha_processando') THEN
    CASE WHEN pg_try_advisory_lock({end_lock_key}, (coalesce(NEW.id_inicial, NEW.id) % 2147483648)::integer)
    THEN NOT pg_advisory_unlock({end_lock_key}, (coalesce(NEW.id_inicial, NEW.id) % 2147483648)::integer)
    ELSE true END
ELSE false END)
EXECUTE FUNCTION {end_function}();
