-- get_job and list_jobs, after jobs_detail.sql: per attempt, the claim that handed it out
-- (claimed_at, worker) and, for a completed last attempt, its result. Lookup path.
--   - an attempt with an outcome: its completion row named the receipt; one probe of
--     receipts_cursor (lane, receipt_id);
--   - a running attempt: the newest receipt of its lane holding it, among the receipts that
--     can hold an open attempt (after the rescue mark, or named by a long lease, as in
--     list_claimed.sql);
--   - the result: results_job (job_id).
-- The arrays come through an InitPlan, as in jobs_detail.sql, so the generic plan is kept.
-- $1 job ids, $2 attempts, $3 lanes, $4 receipt ids (NULL: running), $5 want the result
WITH a AS (
    SELECT *
      FROM unnest((SELECT $1::bigint[]), (SELECT $2::int[]), (SELECT $3::int[]),
                  (SELECT $4::bigint[]), (SELECT $5::bool[]))
           WITH ORDINALITY AS a(job_id, attempt, lane, receipt_id, want_result, ord)
)
SELECT a.ord, rcp.claimed_at, rcp.worker, res.result
  FROM a
  LEFT JOIN LATERAL (
      -- A handed-over attempt (ADR 0008) carries its claim (long_leases primary key).
      SELECT ll.claimed_at, ll.worker
        FROM pgferry.long_leases ll
       WHERE ll.job_id = a.job_id AND ll.attempt = a.attempt AND ll.handed_over
      UNION ALL
      SELECT rc.claimed_at, rc.worker
        FROM pgferry.receipts rc
       WHERE a.receipt_id IS NOT NULL AND rc.lane = a.lane AND rc.receipt_id = a.receipt_id
      UNION ALL
      (SELECT rc.claimed_at, rc.worker
         FROM pgferry.receipts rc
        WHERE a.receipt_id IS NULL AND rc.lane = a.lane
          AND rc.receipt_id > least((SELECT ls.rescue_mark FROM pgferry.leader_state ls),
                                    (SELECT min(ll.receipt_id) - 1 FROM pgferry.long_leases ll
                                      WHERE ll.lane = a.lane AND NOT ll.handed_over))
          AND rc.job_ids @> ARRAY[a.job_id]
        ORDER BY rc.receipt_id DESC
        LIMIT 1)
      LIMIT 1) rcp ON true
  LEFT JOIN LATERAL (
      SELECT r.result FROM pgferry.results r
       WHERE a.want_result AND r.job_id = a.job_id AND r.attempt = a.attempt
      UNION ALL
      SELECT ll.result FROM pgferry.long_leases ll
       WHERE a.want_result AND ll.job_id = a.job_id AND ll.attempt = a.attempt
         AND ll.handed_over AND ll.result IS NOT NULL
       LIMIT 1) res ON true
 ORDER BY a.ord
