DELETE FROM pgferry_mon.targets WHERE tenant_id = $1 AND name = $2
