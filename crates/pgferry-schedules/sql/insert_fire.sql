INSERT INTO pgferry_sched.fires (schedule_id, fire_at, outcome, reason)
VALUES ($1, $2, $3, $4)
ON CONFLICT (schedule_id, fire_at) DO NOTHING
RETURNING fire_at
