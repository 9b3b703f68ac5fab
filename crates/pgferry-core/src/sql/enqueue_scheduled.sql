-- enqueue of a batch in which some jobs have a future run_at: still one statement. Due jobs
-- go into the log, future ones into `scheduled` (the promoter moves them when due). Batches
-- without a future run_at use enqueue.sql, the hot path.
-- Arrays, one element per job: lane, kind, args, meta, max attempts, run_at (NULL: now).
-- Names are enqueue.rs's EnqueueBatch fields (checked by a unit test).
-- params: $1 lanes, $2 kinds, $3 args, $4 metas, $5 max_attempts, $6 run_ats
WITH u AS MATERIALIZED (
    SELECT u.*, nextval('pgferry.job_id_seq') AS job_id
      FROM unnest($1::int[], $2::text[], $3::jsonb[], $4::jsonb[], $5::int[],
                  $6::timestamptz[])
           WITH ORDINALITY AS u(lane, kind, args, meta, max_attempts, run_at, ord)
),
due AS (
    INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
    SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
           u.lane, u.job_id, 1, u.max_attempts, u.kind, u.args, u.meta
      FROM u WHERE u.run_at IS NULL OR u.run_at <= now()
     ORDER BY u.ord
),
later AS (
    INSERT INTO pgferry.scheduled (job_id, lane, attempt, max_attempts, kind, args, meta, run_at,
                                   first_run)
    SELECT u.job_id, u.lane, 1, u.max_attempts, u.kind, u.args, u.meta, u.run_at, true
      FROM u WHERE u.run_at > now()
)
SELECT u.job_id FROM u ORDER BY u.ord
