-- One batch done: counts it and extends the lease, only while this owner still runs it
-- (no row: cancelled, or taken over). $1 op, $2 owner, $3 jobs in the batch, $4 lease s.
UPDATE pgferry.dashboard_ops
   SET done = done + $3::bigint, batches = batches + 1, updated_at = now(),
       lease_until = now() + make_interval(secs => $4::float8)
 WHERE op_id = $1::bigint AND owner = $2::text AND status = 'running'
RETURNING op_id
