CREATE INDEX {idx_subscriber} ON {subscriber_table} (processo, tenant, grupo_empresarial);
