-- Which of a pass's fire times already have a fire row (a backfill, an earlier pass): those
-- run nothing. Primary-key probes.
SELECT f.schedule_id, f.fire_at
FROM unnest($1::bigint[], $2::timestamptz[]) AS u(schedule_id, fire_at)
JOIN pgferry_sched.fires f ON f.schedule_id = u.schedule_id AND f.fire_at = u.fire_at
