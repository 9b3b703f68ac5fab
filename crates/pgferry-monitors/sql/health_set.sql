UPDATE pgferry_mon.schedule_health SET state = $2, bad_fire_at = $3, updated_at = now()
WHERE schedule_id = $1
