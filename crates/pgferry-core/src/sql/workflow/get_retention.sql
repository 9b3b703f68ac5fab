-- A queue's own retention of ended instances, in seconds (no row: the leader's default).
-- $1 queue.
SELECT extract(epoch FROM r.retention)::float8 AS secs
  FROM pgferry.wf_queue_retention r
 WHERE r.queue = $1::text
