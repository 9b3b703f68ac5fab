-- $1 tenant_id, $2 prefix, $3 secret_sha256, $4 scopes, $5 label. Returns key_id.
INSERT INTO pgferry.api_keys (tenant_id, prefix, secret_sha256, scopes, label)
VALUES ($1, $2, $3, $4, $5)
RETURNING key_id
