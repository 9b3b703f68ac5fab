-- Retention: removes up to $2 instances that ended longer ago than their queue's retention
-- (wf_queue_retention, else $1 seconds), with their signals and step history, in one
-- statement (the leader's janitor; never on the hot path). The queues with ended instances
-- are found by a loose scan of wf_instances_finished (one index probe per queue), and each
-- queue's oldest are read from the same index up to its own cut-off, so no queue's
-- younger instances are walked past.
WITH RECURSIVE queues (queue) AS (
    SELECT min(i.queue) FROM pgferry.wf_instances i WHERE NOT i.active
    UNION ALL
    SELECT (SELECT min(i.queue) FROM pgferry.wf_instances i
             WHERE NOT i.active AND i.queue > q.queue)
      FROM queues q
     WHERE q.queue IS NOT NULL
), doomed AS (
    SELECT x.id
      FROM queues q
      LEFT JOIN pgferry.wf_queue_retention r ON r.queue = q.queue
     CROSS JOIN LATERAL (
           SELECT i.id FROM pgferry.wf_instances i
            WHERE NOT i.active AND i.queue = q.queue
              AND i.finished_at < now() - coalesce(r.retention, make_interval(secs => $1::float8))
            ORDER BY i.finished_at
            LIMIT $2::int) x
     WHERE q.queue IS NOT NULL
     LIMIT $2::int
), gone AS (
    DELETE FROM pgferry.wf_instances i USING doomed d WHERE i.id = d.id
    RETURNING i.id
), inbox AS (
    -- Two deletes, one per partial index of wf_signals (each predicate implies its index's).
    DELETE FROM pgferry.wf_signals s USING gone
     WHERE s.instance_id = gone.id AND s.consumed_gen IS NULL
), consumed AS (
    DELETE FROM pgferry.wf_signals s USING gone
     WHERE s.instance_id = gone.id AND s.consumed_gen IS NOT NULL
), steps AS (
    DELETE FROM pgferry.wf_steps s USING gone WHERE s.instance_id = gone.id
)
SELECT count(*) AS removed FROM gone
