UPDATE pgferry_mon.fire_cursor SET recorded_at = $1, schedule_id = $2, fire_at = $3
