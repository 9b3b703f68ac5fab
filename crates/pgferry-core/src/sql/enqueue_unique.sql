-- enqueue of a batch in which some jobs carry a unique key: still one statement. A job whose
-- key is free takes it and is enqueued (into the log or `scheduled`); a job whose key is held
-- is not enqueued and answers the holder's id (NULL when the holder committed after this
-- statement's snapshot: the caller looks it up). Two jobs of one batch with the same key:
-- the first wins. Primary key unique_keys (queue, key).
-- Arrays, one element per job: lane, kind, args, meta, max attempts, run_at, queue name,
-- unique key (NULL: no key), period ms (completed jobs hold the key this long). Names are
-- enqueue.rs's EnqueueBatch fields (checked by a unit test).
-- params: $1 lanes, $2 kinds, $3 args, $4 metas, $5 max_attempts, $6 run_ats, $7 queues,
--   $8 keys, $9 periods
WITH u AS MATERIALIZED (
    SELECT u.*, nextval('pgferry.job_id_seq') AS job_id
      FROM unnest($1::int[], $2::text[], $3::jsonb[], $4::jsonb[], $5::int[],
                  $6::timestamptz[], $7::text[], $8::text[], $9::bigint[])
           WITH ORDINALITY
           AS u(lane, kind, args, meta, max_attempts, run_at, queue, key, period_ms, ord)
),
taken AS (
    INSERT INTO pgferry.unique_keys (queue, key, job_id, period_ms)
    SELECT DISTINCT ON (u.queue, u.key) u.queue, u.key, u.job_id, u.period_ms
      FROM u WHERE u.key IS NOT NULL
     ORDER BY u.queue, u.key, u.ord
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING queue, key, job_id
),
w AS (
    SELECT u.* FROM u
     WHERE u.key IS NULL OR u.job_id IN (SELECT t.job_id FROM taken t)
),
due AS (
    INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
    SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
           w.lane, w.job_id, 1, w.max_attempts, w.kind, w.args, w.meta
      FROM w WHERE w.run_at IS NULL OR w.run_at <= now()
     ORDER BY w.ord
),
later AS (
    INSERT INTO pgferry.scheduled (job_id, lane, attempt, max_attempts, kind, args, meta, run_at,
                                   first_run)
    SELECT w.job_id, w.lane, 1, w.max_attempts, w.kind, w.args, w.meta, w.run_at, true
      FROM w WHERE w.run_at > now()
)
-- The holder of a lost key: a row from before this statement (k), or the batch's own
-- first job with that key (t; rows inserted by a CTE are not visible to scans of the table).
SELECT CASE WHEN w.job_id IS NOT NULL THEN u.job_id ELSE coalesce(t.job_id, k.job_id) END AS job_id,
       w.job_id IS NULL AS duplicate
  FROM u
  LEFT JOIN w ON w.job_id = u.job_id
  LEFT JOIN taken t ON t.queue = u.queue AND t.key = u.key
  LEFT JOIN pgferry.unique_keys k ON k.queue = u.queue AND k.key = u.key
 ORDER BY u.ord
