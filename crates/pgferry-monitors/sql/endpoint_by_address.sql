SELECT id, tenant_id, slug, address, sig_scheme, sig_header, sig_secret, event_id_header, targets, created_at FROM pgferry_mon.endpoints WHERE address = $1
