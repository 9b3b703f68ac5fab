-- One queue by engine name ($1).
SELECT name, shards, max_attempts, lease_ms, paused
FROM pgferry.queues
WHERE name = $1
