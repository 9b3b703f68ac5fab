UPDATE pgferry_mon.monitors SET realert_at = $2 WHERE id = $1
