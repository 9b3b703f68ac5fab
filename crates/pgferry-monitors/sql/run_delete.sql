DELETE FROM pgferry_mon.schedule_runs WHERE schedule_id = $1 AND fire_at = $2
