-- $1 component, $2 version, $3 name, $4 checksum
INSERT INTO pgferry.schema_migrations (component, version, name, checksum) VALUES ($1, $2, $3, $4)
