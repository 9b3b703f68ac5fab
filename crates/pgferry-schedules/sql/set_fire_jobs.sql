UPDATE pgferry_sched.fires f
SET job_id = u.job_id
FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[]) AS u(schedule_id, fire_at, job_id)
WHERE f.schedule_id = u.schedule_id AND f.fire_at = u.fire_at
