DELETE FROM pgferry_http.signing_secrets WHERE tenant_id = $1 AND id = $2 RETURNING id
