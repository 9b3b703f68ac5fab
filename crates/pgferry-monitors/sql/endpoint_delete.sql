DELETE FROM pgferry_mon.endpoints WHERE tenant_id = $1 AND slug = $2
