-- get_job: the value a completed attempt returned, if any. Index results_job (job_id).
-- $1 job id, $2 attempt
SELECT r.result FROM pgferry.results r WHERE r.job_id = $1 AND r.attempt = $2 LIMIT 1
