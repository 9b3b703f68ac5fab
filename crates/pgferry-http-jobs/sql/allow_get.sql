SELECT ranges, cidrs, updated_at FROM pgferry_http.allow_lists WHERE tenant_id = $1
