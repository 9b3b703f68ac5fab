-- Adds a secret unless the tenant already has $3 (the limit); no row when full. Run after
-- secret_lock.sql in the same transaction, so two concurrent adds cannot both pass.
INSERT INTO pgferry_http.signing_secrets (tenant_id, secret)
SELECT $1, $2
WHERE (SELECT count(*) FROM pgferry_http.signing_secrets WHERE tenant_id = $1) < $3
RETURNING id, created_at
