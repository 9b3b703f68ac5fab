-- One queue by engine name ($1).
SELECT name, shards, max_attempts, lease_ms, paused, backoff_base_ms, backoff_cap_ms,
       retention_ms, aging_ms, concurrency, async_commit
FROM pgferry.queues
WHERE name = $1
