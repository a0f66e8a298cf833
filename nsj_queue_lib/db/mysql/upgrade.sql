-- Brings a queue table made for nsj-queue-lib 1.2.2 (the specification's
-- columns; 1.2.2 printed no MySQL DDL of its own) or by an earlier run of this
-- script to the current schema. MySQL 8 has neither ADD COLUMN IF NOT EXISTS
-- nor CREATE INDEX IF NOT EXISTS, so each step looks in information_schema
-- first and runs its statement only when the column or index is missing:
-- the script is idempotent and runs unchanged on MySQL 8 and MariaDB.
-- Existing column types are left as they are, but for the limits table's
-- paused_until (a UTC DATETIME since the TIMESTAMP ended in 2038).
{server_check}

{layout_check}

{add_columns}

-- Indexes whose columns changed since an earlier release (status left out:
-- indexes.sql says why), and the unique indexes made descending since (indexes.sql
-- says why), are rebuilt in place, under their own names.
{redefine_indexes}

{add_indexes}{day_trigger_upgrade}

{subscriber_table_ddl}
{add_subscriber_indexes}
{add_subscriber_columns}
{add_limits_columns}

{periodic_table_ddl}

{workers_table_ddl}

{workflow_ddl}
{add_workflow_columns}

-- The claim procedure of this release (claim_next_<queue>_v<N>) replaces an
-- earlier build of itself. Earlier releases' procedures stay, for their workers
-- during a rolling upgrade: db_gen --drop-old-routines drops them afterwards.
DROP PROCEDURE IF EXISTS {claim_function};
{claim_procedure_ddl}

{previous_claim_ddl}

-- The limited claim (per-processo limits) replaces an earlier build of itself.
DROP PROCEDURE IF EXISTS {limited_claim};
{limited_claim_ddl}
