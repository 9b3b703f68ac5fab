INSERT INTO pgferry_mon.schedule_runs (schedule_id, fire_at, job_id)
SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[])
ON CONFLICT DO NOTHING
