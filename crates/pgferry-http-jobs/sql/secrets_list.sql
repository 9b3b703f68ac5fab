-- A tenant's signing secrets, newest first.
SELECT id, secret, created_at FROM pgferry_http.signing_secrets WHERE tenant_id = $1 ORDER BY id DESC
