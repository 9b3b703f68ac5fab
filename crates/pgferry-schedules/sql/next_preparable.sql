-- The next time a fire can be prepared ahead (ADR 0025): the earliest fire in ($1, $2] of
-- an unpaused schedule whose fire needs no state at its time (a job target, overlap
-- allow). Index schedules_due, in fire order; stops at the first match.
SELECT next_fire_at FROM pgferry_sched.schedules
WHERE NOT paused AND next_fire_at IS NOT NULL AND next_fire_at > $1 AND next_fire_at <= $2
  AND overlap = 'allow' AND target->>'type' = 'job'
ORDER BY next_fire_at
LIMIT 1
