DELETE FROM pgferry_sched.schedules WHERE tenant_id = $1 AND name = $2
