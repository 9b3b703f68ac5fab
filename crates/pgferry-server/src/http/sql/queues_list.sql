-- The queues of one tenant: engine names starting with its prefix ($1, e.g. 't7.').
SELECT name, shards, max_attempts, lease_ms, paused, backoff_base_ms, backoff_cap_ms,
       retention_ms, aging_ms, concurrency, async_commit
FROM pgferry.queues
WHERE left(name, length($1)) = $1
ORDER BY name
