-- list.sql for an active status (runnable, running, sleeping, awaiting, waiting_children,
-- queued): a page of a queue's instances with that status, newest first, keyset on id,
-- from the queue's active instances only (index wf_instances_active, migration 0020), and
-- bounded: at most $8 of them are read per call.
--
-- `status` cannot be indexed (every step update changes it and must stay HOT, 0015), and
-- an active status may match rarely: walking the queue newest first (list.sql) read its
-- whole history of ended instances to find one. Here the walk skips ended instances (the
-- index holds active ones only) and stops after $8 rows even when the active set is large;
-- the row at position $8 is returned as a marker (pos = $8) so the caller can page on
-- below it: a page may come back short, even empty, with more to read.
--
-- Ordered by (active, id), the index's key after the queue, not by id alone: only
-- wf_instances_active yields that order, so the planner cannot walk the primary key (or
-- wf_instances_queue) newest first and filter `active`, which it estimated as cheap
-- (active rows spread evenly) and which read every ended instance above old active ones
-- (65,001 rows for 5,000 in the plan test). Another index now needs a sort of all it
-- reads, chosen only when its range is small (a cursor near the oldest instance).
-- Lazy by construction: the outer LIMIT stops pulling once the page is full, the inner
-- LIMIT after $8 rows, and row_number() over the index order streams (no sort).
-- Planned per call (Workflows::list does not cache it), as list_ended.sql.
-- Parameters as list.sql ($3 is never NULL here, $4 always NULL: a correlation key reads
-- list_correlated.sql), and $8 the most active instances read.
SELECT s.id, s.kind, s.queue, s.step, s.status, s.attempt, s.parent_id, s.correlation_key,
       s.concurrency_key, s.error, s.created_at, s.updated_at, s.finished_at,
       s.pos,
       (s.status = $3::text
        AND ($2::text IS NULL OR s.kind = $2::text)
        AND ($4::text IS NULL OR s.correlation_key = $4::text)
        AND ($5::timestamptz IS NULL OR s.created_at >= $5::timestamptz)) AS hit
  FROM (SELECT i.active, i.id, i.kind, i.queue, i.step, i.status, i.attempt, i.parent_id,
               i.correlation_key, i.concurrency_key, i.error, i.created_at, i.updated_at,
               i.finished_at, row_number() OVER (ORDER BY i.active DESC, i.id DESC) AS pos
          FROM pgferry.wf_instances i
         WHERE i.queue = $1::text
           AND i.active
           -- The cursor as an index bound (coalesce: a NULL cursor starts at the newest).
           AND i.id < coalesce($6::bigint, 9223372036854775807)
         ORDER BY i.active DESC, i.id DESC
         LIMIT $8::int) s
 WHERE (s.status = $3::text
        AND ($2::text IS NULL OR s.kind = $2::text)
        AND ($4::text IS NULL OR s.correlation_key = $4::text)
        AND ($5::timestamptz IS NULL OR s.created_at >= $5::timestamptz))
    OR s.pos = $8::int
 ORDER BY s.active DESC, s.id DESC
 LIMIT $7::int
