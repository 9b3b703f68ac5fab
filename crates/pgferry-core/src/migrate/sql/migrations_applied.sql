-- $1 component
SELECT version, name, checksum FROM pgferry.schema_migrations WHERE component = $1 ORDER BY version
