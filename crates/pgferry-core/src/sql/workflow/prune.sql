-- Retention: removes up to $2 instances that ended more than $1 seconds ago, with their
-- signals and step history, in one statement (the leader's janitor; never on the hot path).
WITH gone AS (
    DELETE FROM pgferry.wf_instances
     WHERE id IN (SELECT id FROM pgferry.wf_instances
                   WHERE NOT active AND finished_at < now() - make_interval(secs => $1::float8)
                   ORDER BY finished_at
                   LIMIT $2::int)
    RETURNING id
), signals AS (
    DELETE FROM pgferry.wf_signals s USING gone WHERE s.instance_id = gone.id
), steps AS (
    DELETE FROM pgferry.wf_steps s USING gone WHERE s.instance_id = gone.id
)
SELECT count(*) AS removed FROM gone
