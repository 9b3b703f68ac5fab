-- cancel: one statement. A scheduled job leaves `scheduled`; any job still in the log gets a
-- cancellation request that claims honour (a pending job is closed, never handed out) and
-- that running workers hear about through NOTIFY pgferry_cancel (sent at commit) and their
-- heartbeats. Dead jobs and unknown ids are reported, not recorded.
-- ready_rows() (ready_by_id, ready_claim), scheduled and dead primary keys.
-- $1 job id, $2 reason
WITH sched AS (
    DELETE FROM pgferry.scheduled WHERE job_id = $1
    RETURNING job_id, lane, attempt, max_attempts, kind, args, meta, run_at, enqueued_at
),
found AS (
    -- A running attempt handed over to long_leases (ADR 0008) may have left the log.
    SELECT EXISTS (SELECT 1 FROM pgferry.ready_rows($1) r)
           OR EXISTS (SELECT 1 FROM pgferry.long_leases ll
                       WHERE ll.job_id = $1 AND ll.handed_over AND ll.outcome IS NULL)
             AS in_log,
           EXISTS (SELECT 1 FROM pgferry.dead d WHERE d.job_id = $1) AS is_dead
),
req AS (
    INSERT INTO pgferry.cancels (job_id, reason, lane, attempt, max_attempts, kind, args, meta,
                                 run_at, enqueued_at)
    SELECT $1, $2, sched.lane, sched.attempt, sched.max_attempts, sched.kind, sched.args,
           sched.meta, sched.run_at, sched.enqueued_at
      FROM found LEFT JOIN sched ON true
     WHERE (found.in_log OR sched.job_id IS NOT NULL) AND NOT found.is_dead
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id
),
note AS (
    SELECT pg_notify('pgferry_cancel', req.job_id::text) AS sent FROM req
)
SELECT EXISTS (SELECT 1 FROM sched) AS was_scheduled, found.in_log, found.is_dead,
       EXISTS (SELECT 1 FROM req) AS recorded, (SELECT count(*) FROM note) AS notified
  FROM found
