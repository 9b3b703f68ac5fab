-- The fires of one pass, at once; only the times that had no fire come back.
INSERT INTO pgferry_sched.fires (schedule_id, fire_at, outcome)
SELECT u.schedule_id, u.fire_at, 'fired'
FROM unnest($1::bigint[], $2::timestamptz[]) AS u(schedule_id, fire_at)
ON CONFLICT (schedule_id, fire_at) DO NOTHING
RETURNING schedule_id, fire_at
