DELETE FROM pgferry_http.rate_limits WHERE tenant_id = $1 AND destination = $2 RETURNING destination
