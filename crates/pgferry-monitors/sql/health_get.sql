SELECT state, bad_fire_at FROM pgferry_mon.schedule_health WHERE schedule_id = $1 FOR UPDATE
