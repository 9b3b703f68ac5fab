INSERT INTO pgferry_mon.endpoints
    (tenant_id, slug, sig_scheme, sig_header, sig_secret, event_id_header, targets)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (slug) DO NOTHING
RETURNING id, tenant_id, slug, sig_scheme, sig_header, sig_secret, event_id_header, targets, created_at
