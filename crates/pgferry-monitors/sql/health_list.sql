-- The tenant's schedules that are not up, with their state.
SELECT s.name, h.state, h.bad_fire_at
FROM pgferry_mon.schedule_health h JOIN pgferry_sched.schedules s ON s.id = h.schedule_id
WHERE s.tenant_id = $1 AND s.name = $2
