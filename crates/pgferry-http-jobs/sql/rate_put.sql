INSERT INTO pgferry_http.rate_limits (tenant_id, destination, per_sec, burst) VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id, destination) DO UPDATE SET per_sec = EXCLUDED.per_sec, burst = EXCLUDED.burst, updated_at = now()
RETURNING updated_at
