-- list.sql for a correlation key: every instance of the key in the queue, ended or not,
-- newest first, keyset on id (index wf_instances_correlation_all, migration 0017; the
-- unique wf_instances_correlation holds only the active one).
-- Planned per call (Workflows::list does not cache it): a generic plan would estimate the
-- status or key at 1/n_distinct and walk the primary key newest first instead.
-- Parameters as list.sql; $4 is never NULL here.
SELECT i.id, i.kind, i.queue, i.step, i.status, i.attempt, i.parent_id, i.correlation_key,
       i.concurrency_key, i.error, i.created_at, i.updated_at, i.finished_at
  FROM pgferry.wf_instances i
 WHERE i.queue = $1::text
   AND i.correlation_key = $4::text
   -- The cursor as an index bound (coalesce: a NULL cursor starts at the newest).
   AND i.id < coalesce($6::bigint, 9223372036854775807)
   AND ($2::text IS NULL OR i.kind = $2::text)
   AND ($3::text IS NULL OR i.status = $3::text)
   AND ($5::timestamptz IS NULL OR i.created_at >= $5::timestamptz)
 ORDER BY i.correlation_key DESC, i.id DESC
 LIMIT $7::int
