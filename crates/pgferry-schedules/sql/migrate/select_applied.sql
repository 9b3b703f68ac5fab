SELECT version, name, checksum FROM pgferry_sched.schema_migrations ORDER BY version
