-- A subject's alerts, newest first, before id $4.
SELECT id, subject_type, subject, kind, reason, at, details
FROM pgferry_mon.alerts
WHERE tenant_id = $1 AND subject_type = $2 AND subject = $3 AND id < $4
ORDER BY id DESC
LIMIT $5
