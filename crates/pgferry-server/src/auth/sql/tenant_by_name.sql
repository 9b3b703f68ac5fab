SELECT tenant_id, name, created_at FROM pgferry.tenants WHERE name = $1
