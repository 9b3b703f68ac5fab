-- list_jobs(state = scheduled): `scheduled` by job id, newest first (primary key backwards).
-- $1 the queue's lanes, $2 kind (NULL: any), $3 cursor (NULL: from the newest), $4 limit
SELECT s.job_id FROM pgferry.scheduled s
 WHERE s.lane = ANY ($1) AND ($2::text IS NULL OR s.kind = $2)
   AND ($3::bigint IS NULL OR s.job_id < $3)
 ORDER BY s.job_id DESC
 LIMIT $4
