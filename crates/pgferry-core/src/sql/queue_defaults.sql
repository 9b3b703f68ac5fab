-- Defaults of a queue that has no lanes yet. $1 queue name
SELECT max_attempts, lease_ms FROM pgferry.queues WHERE name = $1
