{queue_table_ddl}{autovacuum}

{indexes}

{trigger}

{workflow_ddl}

{claim_function_ddl}

-- Subscribers of pub/sub and webhook publications.
{subscriber_table_ddl}
{subscriber_indexes}

{periodic_table_ddl}
{workers_table_ddl}
{limits_table_ddl}

-- The limited claim: the start of a task of a processo with limits.
{limited_claim_ddl}
