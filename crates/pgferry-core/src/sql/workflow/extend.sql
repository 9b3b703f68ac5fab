-- Extend the leases of claimed steps still held (heartbeat of a long step): only a step
-- whose claim is current (same step_seq) and still running keeps its lease; per step, the
-- new lease end (NULL: not held any more) and the instance's status (NULL: no such
-- instance). $1 instance ids, $2 their claims' step_seq, $3 the lease in milliseconds.
WITH req AS (
    SELECT q.id, q.seq FROM unnest($1::bigint[], $2::int[]) AS q(id, seq)
), extended AS (
    UPDATE pgferry.wf_ready r
       SET visible_at = now() + make_interval(secs => $3::int / 1000.0)
      FROM req, pgferry.wf_instances i
     WHERE r.instance_id = req.id AND i.id = req.id AND i.step_seq = req.seq
       AND i.status = 'running'
    RETURNING r.instance_id, r.visible_at
)
SELECT req.id, req.seq, e.visible_at AS lease_until, i.status
  FROM req
  LEFT JOIN extended e ON e.instance_id = req.id
  LEFT JOIN pgferry.wf_instances i ON i.id = req.id
