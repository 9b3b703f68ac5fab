-- The fires of one pass with their jobs, each row written once. The pass read these times
-- as free under the schedules' row locks; a time that comes back missing was written by
-- someone without that lock, and fails the pass.
-- $4: recorded_at's floor, the fire time of fires prepared ahead (ADR 0025; NULL for a
-- pass after the time): those are written before their time and committed at it, and the
-- monitors' watcher reads fires in recorded_at order, trusting that none commits long after
-- its recorded_at.
INSERT INTO pgferry_sched.fires (schedule_id, fire_at, outcome, job_id, recorded_at)
SELECT u.schedule_id, u.fire_at, 'fired', u.job_id, greatest(now(), $4::timestamptz)
FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[]) AS u(schedule_id, fire_at, job_id)
ON CONFLICT (schedule_id, fire_at) DO NOTHING
RETURNING schedule_id, fire_at
