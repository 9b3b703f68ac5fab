-- Does the segment hold an attempt without an outcome (unclaimed, running, or leased)?
-- Run-time pruning keeps both scans inside the one partition; completions_attempt serves the
-- anti-join probe. Leader-only, once per rotation, outside any lock.
-- $1 segment
SELECT EXISTS (
    SELECT 1 FROM pgferry.ready r
     WHERE r.segment = $1
       AND NOT EXISTS (SELECT 1 FROM pgferry.completions c
                        WHERE c.segment = $1 AND c.job_id = r.job_id AND c.attempt = r.attempt))
