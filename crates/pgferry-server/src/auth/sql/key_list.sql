-- Keys of one tenant ($1 tenant_id), never their secrets.
SELECT key_id, prefix, scopes, label, created_at, revoked_at, last_used_at
FROM pgferry.api_keys
WHERE tenant_id = $1
ORDER BY key_id
