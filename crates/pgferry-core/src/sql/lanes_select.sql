-- $1 queue name
SELECT l.lane, l.priority, l.shard, q.max_attempts, q.lease_ms
  FROM pgferry.lanes l JOIN pgferry.queues q USING (queue_id)
 WHERE q.name = $1
 ORDER BY l.priority, l.shard
