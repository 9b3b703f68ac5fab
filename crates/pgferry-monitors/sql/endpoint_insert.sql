INSERT INTO pgferry_mon.endpoints
    (tenant_id, slug, sig_scheme, sig_header, sig_secret, event_id_header, targets, address)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (tenant_id, slug) DO NOTHING
RETURNING id, tenant_id, slug, address, sig_scheme, sig_header, sig_secret, event_id_header, targets, created_at
