-- Stores a lane's recounted sizes, unless a write reached its counters since $6 was read
-- (unless $7, forced). Totals are kept. Primary key lane_counters (lane).
-- $1 lane, $2 pending, $3 running, $4 scheduled, $5 dead, $6 version read before the
-- truth (NULL: there was no row), $7 force
INSERT INTO pgferry.lane_counters AS c (lane, pending, running, scheduled, dead, version,
                                        recounted_at)
VALUES ($1, $2, $3, $4, $5, 1, now())
ON CONFLICT (lane) DO UPDATE
   SET pending = EXCLUDED.pending,
       running = EXCLUDED.running,
       scheduled = EXCLUDED.scheduled,
       dead = EXCLUDED.dead,
       version = c.version + 1,
       recounted_at = now()
 WHERE $7::bool OR c.version = $6::bigint
RETURNING c.version
