-- Create or reconfigure a queue. Cold path (operators, tests, bench).
-- $1 name, $2 shards, $3 max_attempts, $4 lease_ms
INSERT INTO pgferry.queues (name, shards, max_attempts, lease_ms) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE
   SET shards = EXCLUDED.shards, max_attempts = EXCLUDED.max_attempts, lease_ms = EXCLUDED.lease_ms
