-- The distinct queues that hold workflow instances, by a loose scan of index
-- wf_instances_queue (one index probe per distinct queue, not a scan of the instances);
-- the caller keeps its tenant's. $1 at most this many queues.
WITH RECURSIVE q AS (
    (SELECT i.queue FROM pgferry.wf_instances i ORDER BY i.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT i.queue FROM pgferry.wf_instances i
             WHERE i.queue > q.queue ORDER BY i.queue LIMIT 1)
      FROM q
     WHERE q.queue IS NOT NULL
)
SELECT queue FROM q WHERE queue IS NOT NULL LIMIT $1::bigint
