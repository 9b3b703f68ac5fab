SELECT * FROM pgferry_sched.schedules WHERE tenant_id = $1 AND name > $2 ORDER BY name LIMIT $3
