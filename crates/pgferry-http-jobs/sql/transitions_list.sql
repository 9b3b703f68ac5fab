-- A tenant's transitions, newest first, before the cursor id ($2, NULL: from the newest).
SELECT id, destination, kind, job_id, status, error, at FROM pgferry_http.transitions
WHERE tenant_id = $1 AND ($2::bigint IS NULL OR id < $2)
ORDER BY id DESC LIMIT $3
