-- Evidence for acknowledged jobs still unfinished after the drain (read only when a run
-- failed): per job, its attempts in the log, the receipts that name it (lease, claim time,
-- worker, whether a completion closes the attempt there) and its long_leases rows, with
-- the rescue mark and the time of the look. Scans receipts whole: a failed run's cost only.
-- $1 job ids
SELECT j.job_id, extract(epoch FROM now())::float8 AS looked_at,
       (SELECT ls.rescue_mark FROM pgferry.leader_state ls) AS rescue_mark,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('segment', r.segment,
                                                     'attempt', r.attempt)), '[]')
          FROM pgferry.ready_rows(j.job_id) r) AS ready,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'receipt_id', rc.receipt_id, 'segment', rc.segment, 'lane', rc.lane,
                   'attempt', u.attempt, 'worker', rc.worker, 'claimed_at', rc.claimed_at,
                   'lease_until', rc.lease_until, 'jobs', cardinality(rc.job_ids),
                   'closed', EXISTS (
                       SELECT 1
                         FROM pgferry.completions c,
                              unnest(c.job_ids, c.attempts) AS v(job_id, attempt)
                        WHERE c.receipt_id = rc.receipt_id AND v.job_id = j.job_id
                          AND v.attempt = u.attempt))
                 ORDER BY rc.receipt_id), '[]')
          FROM pgferry.receipts rc, unnest(rc.job_ids, rc.attempts) AS u(job_id, attempt)
         WHERE u.job_id = j.job_id) AS receipts,
       (SELECT coalesce(jsonb_agg(to_jsonb(ll) ORDER BY ll.attempt), '[]')
          FROM pgferry.long_leases ll WHERE ll.job_id = j.job_id) AS long_leases
  FROM unnest($1::bigint[]) AS j(job_id)
 ORDER BY j.job_id
