-- Auth-cache miss: the key row of a prefix with its tenant. $1 prefix.
-- `touch_due`: last_used_at is older than the bookkeeping interval ($2 seconds).
SELECT k.key_id, k.tenant_id, t.name AS tenant, k.secret_sha256, k.scopes,
       k.revoked_at IS NOT NULL AS revoked,
       k.last_used_at IS NULL OR k.last_used_at < now() - make_interval(secs => $2) AS touch_due
FROM pgferry.api_keys k
JOIN pgferry.tenants t USING (tenant_id)
WHERE k.prefix = $1
