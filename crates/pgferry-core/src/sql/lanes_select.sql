-- A queue's lanes and settings, for the lane cache. LEFT JOIN: a queue without lanes yet
-- still has settings (one row with a NULL lane). $1 queue name
SELECT l.lane, l.priority, l.shard, q.max_attempts, q.lease_ms, q.paused, q.backoff_base_ms,
       q.backoff_cap_ms, q.aging_ms, q.queue_id, q.concurrency,
       q.async_commit
  FROM pgferry.queues q LEFT JOIN pgferry.lanes l USING (queue_id)
 WHERE q.name = $1
 ORDER BY l.priority, l.shard
