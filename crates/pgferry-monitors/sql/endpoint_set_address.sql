UPDATE pgferry_mon.endpoints SET address = $2 WHERE id = $1
RETURNING id, tenant_id, slug, address, sig_scheme, sig_header, sig_secret, event_id_header, targets, created_at
