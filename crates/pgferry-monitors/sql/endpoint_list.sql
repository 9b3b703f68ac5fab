SELECT id, tenant_id, slug, address, sig_scheme, sig_header, sig_secret, event_id_header, targets, created_at FROM pgferry_mon.endpoints WHERE tenant_id = $1 AND slug > $2
ORDER BY slug LIMIT $3
