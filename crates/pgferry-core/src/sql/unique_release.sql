-- Release a key held by a finished job (only if that job still holds it).
-- $1 queue, $2 key, $3 holder job id
DELETE FROM pgferry.unique_keys WHERE queue = $1 AND key = $2 AND job_id = $3
