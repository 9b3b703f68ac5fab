-- The lanes of one priority of a queue (one per shard), created on first enqueue at that
-- priority, so claimers never visit lanes nobody uses. Cold path (lane cache miss).
-- $1 queue name, $2 priority
WITH q AS (SELECT queue_id, shards FROM pgferry.queues WHERE name = $1)
INSERT INTO pgferry.lanes (queue_id, priority, shard)
SELECT q.queue_id, $2, s FROM q, generate_series(0, q.shards - 1) s
ON CONFLICT (queue_id, priority, shard) DO NOTHING
