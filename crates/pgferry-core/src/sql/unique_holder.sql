-- The job holding a unique key now. $1 queue, $2 key
SELECT job_id, period_ms FROM pgferry.unique_keys WHERE queue = $1 AND key = $2
