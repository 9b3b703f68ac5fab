-- Deletes up to $2 idempotency keys older than $1 milliseconds, oldest first (index on
-- created_at); returns how many.
WITH gone AS (
    DELETE FROM pgferry.idempotency_keys
     WHERE key IN (SELECT key FROM pgferry.idempotency_keys
                    WHERE created_at < now() - make_interval(secs => $1::bigint / 1000.0)
                    ORDER BY created_at
                    LIMIT $2)
    RETURNING 1
)
SELECT count(*) AS dropped FROM gone
