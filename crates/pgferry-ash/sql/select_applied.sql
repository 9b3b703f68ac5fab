SELECT version, name, checksum FROM pgferry_ash.schema_migrations ORDER BY version
