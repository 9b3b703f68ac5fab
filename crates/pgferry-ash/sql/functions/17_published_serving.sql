-- What the pgferry servers published (pgferry_ash.published) about these backends, for the
-- backends whose current statement began inside a published operation: after the operation
-- began (since) and before the snapshot that saw it still running (at). Then the statement
-- is the operation's, whenever the sample was taken; a backend that moved on to another
-- operation since has a later statement start and is not matched (it keeps its role from
-- application_name). Used by the server's sampler and by take_sample() (pg_cron mode).
CREATE OR REPLACE FUNCTION pgferry_ash.published_serving(pids int[], query_starts float8[],
                                                         own text DEFAULT '')
RETURNS TABLE (pid int, role text, queue text, kind text)
LANGUAGE sql STABLE AS $$
    SELECT DISTINCT ON (b.pid) b.pid, e.role, e.queue, e.kind
    FROM unnest(published_serving.pids, published_serving.query_starts) AS b (pid, qs)
    JOIN pgferry_ash.published p ON p.server <> published_serving.own
    CROSS JOIN LATERAL unnest(p.pids, p.since, p.roles, p.queues, p.kinds)
        AS e (pid, since, role, queue, kind)
    WHERE e.pid = b.pid
      AND b.qs IS NOT NULL
      AND e.since <= to_timestamp(b.qs)
      AND to_timestamp(b.qs) <= p.at
    ORDER BY b.pid, p.at DESC
$$
