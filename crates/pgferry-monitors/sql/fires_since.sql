-- Fires recorded after the cursor and before $4 (recorded long enough ago that no
-- transaction still writing fires can have an earlier recorded_at), in recording order.
SELECT f.recorded_at, f.schedule_id, f.fire_at, f.outcome, f.job_id, f.reason,
       s.tenant_id, s.name, s.target->>'type' AS target_type
FROM pgferry_sched.fires f
JOIN pgferry_sched.schedules s ON s.id = f.schedule_id
WHERE (f.recorded_at, f.schedule_id, f.fire_at) > ($1, $2, $3)
  AND f.recorded_at <= $4
ORDER BY f.recorded_at, f.schedule_id, f.fire_at
LIMIT $5
