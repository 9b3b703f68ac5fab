-- Update a queue's settings; NULL keeps the current value. Cold path (operators).
-- $1 name, $2 max_attempts, $3 lease_ms, $4 backoff_base_ms, $5 backoff_cap_ms,
-- $6 retention_ms, $7 aging_ms, $8 paused, $9 concurrency (0: remove the limit),
-- $10 async_commit (queues.async_commit)
UPDATE pgferry.queues
   SET max_attempts    = coalesce($2, max_attempts),
       lease_ms        = coalesce($3, lease_ms),
       backoff_base_ms = coalesce($4, backoff_base_ms),
       backoff_cap_ms  = coalesce($5, backoff_cap_ms),
       retention_ms    = coalesce($6, retention_ms),
       aging_ms        = coalesce($7, aging_ms),
       paused          = coalesce($8, paused),
       concurrency     = CASE WHEN $9::int IS NULL THEN concurrency
                              WHEN $9::int = 0 THEN NULL ELSE $9::int END,
       async_commit    = coalesce($10, async_commit)
 WHERE name = $1
RETURNING name, paused, max_attempts, lease_ms, backoff_base_ms, backoff_cap_ms, retention_ms,
          aging_ms, concurrency, async_commit
