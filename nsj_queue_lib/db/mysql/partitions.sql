-- The partitioned layout (db_gen --layout partitioned; docs/internals/storage.md):
-- the queue's name is partitioned by finished_day. Unfinished attempts (key 1)
-- sit in p_hot, whose size follows the backlog; each attempt that ends moves
-- to the partition of the UTC day it ended (days since 1970-01-01), which
-- retention drops whole. No MAXVALUE partition: a day is added at the end.
-- Yesterday to {days_ahead} days ahead; the workers' purge service keeps adding
-- days ahead and drops those past QUEUE_PURGE_MAX_AGE.
SET @nsjq_today = UNIX_TIMESTAMP() DIV 86400;
SELECT CONCAT('ALTER TABLE {table} ADD PARTITION (',
              GROUP_CONCAT(CONCAT('PARTITION p', d.day, ' VALUES LESS THAN (', d.day + 1, ')')
                           ORDER BY d.day SEPARATOR ', '),
              ')')
INTO @nsjq_ddl
FROM (WITH RECURSIVE days (day) AS (
          SELECT @nsjq_today - 1 UNION ALL SELECT day + 1 FROM days WHERE day < @nsjq_today + {days_ahead}
      ) SELECT day FROM days) AS d;
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
