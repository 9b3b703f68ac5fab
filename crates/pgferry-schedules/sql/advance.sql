UPDATE pgferry_sched.schedules
SET next_fire_at = $2, last_fire_at = $3, last_job_id = $4, buffered_fire_at = $5,
    updated_at = now()
WHERE id = $1
