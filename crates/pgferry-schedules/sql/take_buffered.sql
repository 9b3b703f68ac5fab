UPDATE pgferry_sched.fires SET outcome = 'fired', recorded_at = now()
WHERE schedule_id = $1 AND fire_at = $2 AND outcome = 'buffered'
RETURNING fire_at
