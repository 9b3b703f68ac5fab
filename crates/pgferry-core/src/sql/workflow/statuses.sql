-- Statuses of instances (why an outcome was stale: cancelled, or claimed again). $1 ids.
SELECT id, status, step_seq FROM pgferry.wf_instances WHERE id = ANY ($1::bigint[])
