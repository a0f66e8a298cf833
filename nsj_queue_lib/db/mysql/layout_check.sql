-- db_gen --upgrade for the other layout stops here, before it changes anything:
-- the statement it runs names an unknown column that says what to run instead.
SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = '{schema}' AND TABLE_NAME = '{queue}' AND PARTITION_NAME = 'p_hot') {test}, 'DO `{queue} is {other}: run db_gen --upgrade{flag}`', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
