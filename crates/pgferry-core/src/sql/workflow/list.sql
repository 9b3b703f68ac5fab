-- A page of a queue's instances, newest first, keyset on id (index wf_instances_queue).
-- $1 queue, $2 kind or NULL, $3 status or NULL, $4 correlation key or NULL, $5 created after
-- or NULL, $6 ids below this (the cursor; NULL: from the newest), $7 page size + 1 (the
-- extra row only says whether there is more).
SELECT i.id, i.kind, i.queue, i.step, i.status, i.attempt, i.parent_id, i.correlation_key,
       i.concurrency_key, i.error, i.created_at, i.updated_at, i.finished_at
  FROM pgferry.wf_instances i
 WHERE i.queue = $1::text
   AND ($6::bigint IS NULL OR i.id < $6::bigint)
   AND ($2::text IS NULL OR i.kind = $2::text)
   AND ($3::text IS NULL OR i.status = $3::text)
   AND ($4::text IS NULL OR i.correlation_key = $4::text)
   AND ($5::timestamptz IS NULL OR i.created_at >= $5::timestamptz)
 ORDER BY i.id DESC
 LIMIT $7::int
