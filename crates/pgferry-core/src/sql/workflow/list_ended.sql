-- list.sql for a terminal status (done, failed, cancelled): a page of a queue's instances
-- that ended with it, newest first, keyset on id (index wf_instances_ended, migration 0017),
-- so a status that matches rarely reads its matches, not the queue's history.
-- Planned per call (Workflows::list does not cache it): a generic plan would estimate the
-- status or key at 1/n_distinct and walk the primary key newest first instead.
-- Parameters as list.sql; $3 is never NULL here.
SELECT i.id, i.kind, i.queue, i.step, i.status, i.attempt, i.parent_id, i.correlation_key,
       i.concurrency_key, i.error, i.created_at, i.updated_at, i.finished_at
  FROM pgferry.wf_instances i
 WHERE i.queue = $1::text
   AND i.ended_status = $3::text
   -- The cursor as an index bound (coalesce: a NULL cursor starts at the newest).
   AND i.id < coalesce($6::bigint, 9223372036854775807)
   AND ($2::text IS NULL OR i.kind = $2::text)
   AND ($4::text IS NULL OR i.correlation_key = $4::text)
   AND ($5::timestamptz IS NULL OR i.created_at >= $5::timestamptz)
 ORDER BY i.ended_status DESC, i.id DESC
 LIMIT $7::int
