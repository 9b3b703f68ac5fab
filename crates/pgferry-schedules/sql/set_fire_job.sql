UPDATE pgferry_sched.fires SET job_id = $3 WHERE schedule_id = $1 AND fire_at = $2
