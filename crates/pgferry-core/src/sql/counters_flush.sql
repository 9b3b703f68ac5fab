-- Adds one process's counter deltas, one row per lane, in one statement (once per flush
-- interval, never per job or per batch). Rows go in lane order so that concurrent flushes
-- (and the cold paths that count in their own statement) lock counter rows in one order.
-- Primary key lane_counters (lane).
-- $1 lanes, $2..$9 deltas of pending, running, scheduled, dead, enqueued, completed, failed,
-- cancelled
INSERT INTO pgferry.lane_counters AS c (lane, pending, running, scheduled, dead, enqueued,
                                        completed, failed, cancelled, version)
SELECT u.lane, u.pending, u.running, u.scheduled, u.dead, u.enqueued, u.completed, u.failed,
       u.cancelled, 1
  FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
              $7::bigint[], $8::bigint[], $9::bigint[])
       AS u(lane, pending, running, scheduled, dead, enqueued, completed, failed, cancelled)
 ORDER BY u.lane
ON CONFLICT (lane) DO UPDATE
   SET pending = c.pending + EXCLUDED.pending,
       running = c.running + EXCLUDED.running,
       scheduled = c.scheduled + EXCLUDED.scheduled,
       dead = c.dead + EXCLUDED.dead,
       enqueued = c.enqueued + EXCLUDED.enqueued,
       completed = c.completed + EXCLUDED.completed,
       failed = c.failed + EXCLUDED.failed,
       cancelled = c.cancelled + EXCLUDED.cancelled,
       version = c.version + 1,
       updated_at = now()
