INSERT INTO pgferry_http.transitions (tenant_id, destination, kind, job_id, status, error)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id, at
