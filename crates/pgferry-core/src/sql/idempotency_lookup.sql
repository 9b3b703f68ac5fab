-- The stored answers of idempotency keys (primary key lookups).
SELECT key, fingerprint, job_ids
  FROM pgferry.idempotency_keys
 WHERE key = ANY($1::text[])
