-- Records a destination's latest outcome; returns the one before (NULL: first seen). The
-- scalar subquery reads the statement's snapshot, i.e. the row before this update.
INSERT INTO pgferry_http.destinations AS d (tenant_id, destination, ok) VALUES ($1, $2, $3)
ON CONFLICT (tenant_id, destination) DO UPDATE SET ok = EXCLUDED.ok, updated_at = now()
RETURNING (SELECT p.ok FROM pgferry_http.destinations p WHERE p.tenant_id = $1 AND p.destination = $2) AS before
