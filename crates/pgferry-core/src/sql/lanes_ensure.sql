-- All lanes of a queue: 4 priorities x shards. Cold path (lane cache miss).
-- $1 queue name
WITH q AS (SELECT queue_id, shards FROM pgferry.queues WHERE name = $1)
INSERT INTO pgferry.lanes (queue_id, priority, shard)
SELECT q.queue_id, p, s FROM q, generate_series(0, 3) p, generate_series(0, q.shards - 1) s
ON CONFLICT (queue_id, priority, shard) DO NOTHING
