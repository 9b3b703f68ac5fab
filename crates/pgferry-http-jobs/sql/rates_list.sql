SELECT destination, per_sec, burst, updated_at FROM pgferry_http.rate_limits WHERE tenant_id = $1 ORDER BY destination
