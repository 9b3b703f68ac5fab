DELETE FROM pgferry_mon.monitors WHERE tenant_id = $1 AND name = $2
