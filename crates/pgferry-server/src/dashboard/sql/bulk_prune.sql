-- Forgets ended bulk operations older than $1 seconds (their effect is in the jobs and the
-- audit log keeps that they were started). The table holds one row per operation started
-- by a person, so a scan is cheap.
DELETE FROM pgferry.dashboard_ops
 WHERE status <> 'running' AND finished_at < now() - make_interval(secs => $1::float8)
