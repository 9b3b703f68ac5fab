-- $1 name. Returns the new tenant's id, or no row when the name is taken.
INSERT INTO pgferry.tenants (name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING tenant_id
