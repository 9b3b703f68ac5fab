-- $1 component, $2 name, $3 checksum
INSERT INTO pgferry.schema_functions (component, name, checksum) VALUES ($1, $2, $3)
ON CONFLICT (component, name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()
