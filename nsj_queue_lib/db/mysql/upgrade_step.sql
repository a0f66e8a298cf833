SET @nsjq_ddl = IF((SELECT count(*) FROM information_schema.{catalog} WHERE table_schema = '{schema}' AND table_name = '{object_table}' AND {name_column} = '{object_name}'{condition}, '{statement}', 'DO 0');
PREPARE nsjq_step FROM @nsjq_ddl;
EXECUTE nsjq_step;
DEALLOCATE PREPARE nsjq_step;
