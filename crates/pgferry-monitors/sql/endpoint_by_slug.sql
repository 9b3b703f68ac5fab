SELECT id, tenant_id, slug, sig_scheme, sig_header, sig_secret, event_id_header, targets, created_at FROM pgferry_mon.endpoints WHERE slug = $1
