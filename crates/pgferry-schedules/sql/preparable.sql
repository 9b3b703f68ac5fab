-- The schedules whose fire at $1 is prepared ahead by one batch (ADR 0025): locked until
-- the preparing transaction commits at $1; rows another firer holds are skipped.
SELECT * FROM pgferry_sched.schedules
WHERE NOT paused AND next_fire_at = $1
  AND overlap = 'allow' AND target->>'type' = 'job'
ORDER BY id
LIMIT $2
FOR UPDATE SKIP LOCKED
