-- Autovacuum of the queue table by fixed counts of rows instead of a fraction
-- of the table. Autovacuum's defaults wait for a fifth of the table's rows to
-- be dead (a tenth changed, for ANALYZE), and the table keeps up to
-- QUEUE_PURGE_MAX_AGE days of history: on ten million rows, two million dead
-- versions, whose claim-index entries every claim walks past.
-- - Vacuum at 1000 dead rows (about 500 tasks: claim and settle each leave a
--   dead version, never HOT, so with an entry in every index). A vacuum's
--   pass over the table reads only the pages changed since the previous one
--   (the visibility map skips the rest); its pass over each index, whole,
--   PostgreSQL 14+ skips while few pages hold dead rows. (Hatchet's hot
--   table, kept small, has thresholds of 25 rows; this one holds history.)
-- - Analyze at 10000 changed rows (QUEUE_VACUUM_DEAD_ROWS's default, the
--   workers' vacuum service's own threshold). An ANALYZE reads a fixed sample
--   (up to 300 x default_statistics_target rows) however few rows changed, so
--   it runs less often than a vacuum.
-- - A cost limit of 1000, five times the default budget (vacuum_cost_limit,
--   200), so that a vacuum of this hot table ends before the next thousand
--   dead rows are there.
-- - The insert threshold keeps its default: every enqueued task is then
--   claimed and settled, so the dead rows trigger a vacuum first, and each
--   vacuum starts the count of inserts again.
-- A setting the table already has is left as it is: an operator's own choice
-- survives db_gen --upgrade.
DO $$
DECLARE
    setting text;
BEGIN
    FOREACH setting IN ARRAY ARRAY[
        'autovacuum_vacuum_scale_factor = 0',
        'autovacuum_vacuum_threshold = 1000',
        'autovacuum_analyze_scale_factor = 0',
        'autovacuum_analyze_threshold = 10000',
        'autovacuum_vacuum_cost_limit = 1000'
    ] LOOP
        IF NOT EXISTS (
            SELECT 1
            FROM pg_class AS c, unnest(c.reloptions) AS o
            WHERE c.oid = '{table}'::regclass
              AND split_part(o, '=', 1) = split_part(setting, ' ', 1)
        ) THEN
            EXECUTE format('ALTER TABLE %s SET (%s)', '{table}'::regclass, setting);
        END IF;
    END LOOP;
END
$$;
