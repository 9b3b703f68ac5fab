INSERT INTO pgferry_ash.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)
