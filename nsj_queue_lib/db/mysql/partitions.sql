-- The partitioned layout (db_gen --layout partitioned; docs/internals/storage.md):
-- the queue's name is partitioned by finished_day. Unfinished attempts (key 1)
-- sit in p_hot, whose size follows the backlog; each attempt that ends moves
-- to the partition of the week (Monday to Sunday, UTC) of the day it ended
-- (days since 1970-01-01, a Thursday), which retention drops whole. No
-- MAXVALUE partition: a week is added at the end.
-- The week of yesterday to the one of {days_ahead} days ahead; the workers'
-- purge service keeps adding weeks ahead and drops those past
-- QUEUE_PURGE_MAX_AGE.
SET @nsjq_today = UNIX_TIMESTAMP() DIV 86400;
SET @nsjq_first = @nsjq_today - 1 - (@nsjq_today - 1 + 3) MOD {partition_days};
SELECT CONCAT('ALTER TABLE {table} ADD PARTITION (',
              GROUP_CONCAT(CONCAT('PARTITION p', w.day, ' VALUES LESS THAN (', w.day + {partition_days}, ')')
                           ORDER BY w.day SEPARATOR ', '),
              ')')
INTO @nsjq_ddl
FROM (WITH RECURSIVE weeks (day) AS (
          SELECT @nsjq_first UNION ALL
          SELECT day + {partition_days} FROM weeks WHERE day + {partition_days} <= @nsjq_today + {days_ahead}
      ) SELECT day FROM weeks) AS w;
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
