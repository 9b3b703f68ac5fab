INSERT INTO pgferry_mon.alerts (tenant_id, subject_type, subject, kind, reason, at, details)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id
