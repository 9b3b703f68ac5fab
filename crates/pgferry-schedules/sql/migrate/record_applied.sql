INSERT INTO pgferry_sched.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)
