CREATE INDEX IF NOT EXISTS {idx_subscriber} ON {subscriber_table} (processo, tenant, grupo_empresarial);
