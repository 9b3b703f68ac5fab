-- Advances the schedules of one pass; a NULL job keeps the previous one.
UPDATE pgferry_sched.schedules s
SET next_fire_at = u.next_fire_at, last_fire_at = u.last_fire_at,
    last_job_id = coalesce(u.last_job_id, s.last_job_id), buffered_fire_at = u.buffered_fire_at,
    updated_at = now()
FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[], $4::bigint[], $5::timestamptz[])
    AS u(id, next_fire_at, last_fire_at, last_job_id, buffered_fire_at)
WHERE s.id = u.id
