DELETE FROM pgferry_http.allow_lists WHERE tenant_id = $1 RETURNING tenant_id
