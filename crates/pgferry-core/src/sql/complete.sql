-- complete: every outcome of a batch in one statement (DESIGN §1.5).
-- $1 job_ids bigint[], $2 attempts int[], $3 segments smallint[], $4 receipt_ids bigint[],
-- $5 outcomes smallint[], $6 errors text[], $7 retry delays ms bigint[], $8 results jsonb[],
-- $9 durations ms int[]
--
-- src finds each outcome's attempt in the log: a LATERAL subquery with LIMIT 1 cannot be
-- flattened into a join, so it is always a per-outcome probe of index ready_job in the one
-- partition the segment names (run-time pruning skips the other 15) — never a hash join
-- over a seq-scanned partition, whatever a cached generic plan believes about row counts.
-- An outcome for an attempt that is not in the log is stale. The unique index completions_attempt makes the
-- first outcome win (ON CONFLICT DO NOTHING); only winners cause side effects.
WITH o AS (
    SELECT *
      FROM unnest($1::bigint[], $2::int[], $3::smallint[], $4::bigint[], $5::smallint[],
                  $6::text[], $7::bigint[], $8::jsonb[], $9::int[])
           WITH ORDINALITY
           AS o(job_id, attempt, segment, receipt_id, outcome, error, delay_ms, result, duration_ms, ord)
),
-- One candidate per attempt: a batch that names an attempt twice gets one winner (the
-- first), the others are answered stale.
src AS (
    SELECT DISTINCT ON (o.job_id, o.attempt) o.*, r.lane, r.max_attempts, r.kind, r.args, r.meta
      FROM o
      CROSS JOIN LATERAL (
          SELECT r.lane, r.max_attempts, r.kind, r.args, r.meta
            FROM pgferry.ready r
           WHERE r.segment = o.segment AND r.job_id = o.job_id AND r.attempt = o.attempt
           LIMIT 1) r
     ORDER BY o.job_id, o.attempt, o.ord
),
done AS (
    INSERT INTO pgferry.completions (segment, job_id, attempt, receipt_id, outcome, error, duration_ms)
    SELECT segment, job_id, attempt, receipt_id, outcome, error, duration_ms FROM src
    ON CONFLICT (segment, job_id, attempt) DO NOTHING
    RETURNING job_id, attempt
),
-- Winners, flagged with a hashed SubPlan (linear): a join between two CTEs would be planned
-- as a nested loop from their 1-row estimates, quadratic in the batch size.
flag AS (
    SELECT src.*, (src.job_id, src.attempt) IN (SELECT job_id, attempt FROM done) AS won
      FROM src
),
won AS (
    SELECT * FROM flag WHERE won
),
kept AS (
    INSERT INTO pgferry.results (segment, job_id, attempt, result)
    SELECT segment, job_id, attempt, result FROM won WHERE outcome = 1 AND result IS NOT NULL
),
again AS (
    INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
    SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
           lane, job_id, attempt + 1, max_attempts, kind, args, meta
      FROM won WHERE outcome = 2 AND coalesce(delay_ms, 0) <= 0
),
later AS (
    INSERT INTO pgferry.scheduled (job_id, lane, attempt, max_attempts, kind, args, meta, run_at)
    SELECT job_id, lane, attempt + 1, max_attempts, kind, args, meta,
           now() + delay_ms * interval '1 millisecond'
      FROM won WHERE outcome = 2 AND delay_ms > 0
),
buried AS (
    INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, meta, error)
    SELECT job_id, lane, attempt, max_attempts, kind, args, meta, error
      FROM won WHERE outcome = 3
    ON CONFLICT (job_id) DO UPDATE
       SET attempt = EXCLUDED.attempt, error = EXCLUDED.error, died_at = now()
),
-- Map winners back to input rows: one array, then = ANY per row (no per-row CTE rescans).
winners AS (
    SELECT coalesce(array_agg(ord), '{}') AS ords FROM won
)
SELECT o.job_id, o.attempt, NOT (o.ord = ANY (winners.ords)) AS stale
  FROM o, winners
 ORDER BY o.ord
