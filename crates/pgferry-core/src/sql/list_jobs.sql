-- list_jobs: newest job ids first, keyset on job_id, reading at most $5 ready rows per call
-- (index ready_job backwards on each partition, Merge Append, Limit) so that a page of a
-- small queue among big ones costs a bounded scan; the caller continues from `scanned_to`.
-- Lookup path. $1 the queue's lanes, $2 kind (NULL: any), $3 enqueued since (NULL: any),
-- $4 cursor: job ids below it (NULL: from the newest), $5 scan budget (rows)
WITH cand AS MATERIALIZED (
    SELECT r.job_id, r.attempt, r.lane, r.kind, r.enqueued_at
      FROM pgferry.ready r
     WHERE $4::bigint IS NULL OR r.job_id < $4
     ORDER BY r.job_id DESC
     LIMIT $5
)
SELECT DISTINCT ON (c.job_id) c.job_id,
       (SELECT min(x.job_id) FROM cand x) AS scanned_to,
       (SELECT count(*) FROM cand x) AS scanned
  FROM cand c
 WHERE c.lane = ANY ($1)
   AND ($2::text IS NULL OR c.kind = $2)
   AND ($3::timestamptz IS NULL OR c.enqueued_at >= $3)
 ORDER BY c.job_id DESC
