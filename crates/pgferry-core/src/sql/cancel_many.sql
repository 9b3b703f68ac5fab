-- cancel_matching: the set version of cancel.sql, for one batch of ids (at most 1000). A
-- scheduled job leaves `scheduled`; a job in the log gets a cancellation request (claims
-- close it if pending; its worker hears NOTIFY pgferry_cancel if running). Jobs already
-- requested, dead or unknown are left alone. One row per id: its lane and what happened.
-- Primary keys of scheduled, cancels, dead; ready_rows() (index ready_by_id, then ready_claim) per id.
-- $1 job ids, $2 reason
WITH ids AS (
    SELECT DISTINCT i.job_id FROM unnest($1::bigint[]) AS i(job_id)
),
sched AS (
    DELETE FROM pgferry.scheduled s
     USING ids i
     WHERE s.job_id = i.job_id
    RETURNING s.job_id, s.lane, s.attempt, s.max_attempts, s.kind, s.args, s.meta, s.run_at,
              s.enqueued_at
),
found AS MATERIALIZED (
    SELECT i.job_id,
           -- A running attempt handed over to long_leases (ADR 0008) may have left the log.
           coalesce((SELECT r.lane FROM pgferry.ready_rows(i.job_id) r LIMIT 1),
                    (SELECT ll.lane FROM pgferry.long_leases ll
                      WHERE ll.job_id = i.job_id AND ll.handed_over AND ll.outcome IS NULL
                      LIMIT 1)) AS log_lane,
           EXISTS (SELECT 1 FROM pgferry.dead d WHERE d.job_id = i.job_id) AS is_dead
      FROM ids i
),
req AS (
    INSERT INTO pgferry.cancels (job_id, reason, lane, attempt, max_attempts, kind, args, meta,
                                 run_at, enqueued_at)
    SELECT f.job_id, $2, s.lane, s.attempt, s.max_attempts, s.kind, s.args, s.meta, s.run_at,
           s.enqueued_at
      FROM found f
      LEFT JOIN sched s ON s.job_id = f.job_id
     WHERE (f.log_lane IS NOT NULL OR s.job_id IS NOT NULL) AND NOT f.is_dead
     ORDER BY f.job_id
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, lane
),
note AS (
    SELECT pg_notify('pgferry_cancel', r.job_id::text) FROM req r WHERE r.lane IS NULL
)
SELECT f.job_id, coalesce(s.lane, f.log_lane) AS lane, s.job_id IS NOT NULL AS was_scheduled,
       EXISTS (SELECT 1 FROM req r WHERE r.job_id = f.job_id) AS recorded,
       (SELECT count(*) FROM note) AS notified
  FROM found f
  LEFT JOIN sched s ON s.job_id = f.job_id
