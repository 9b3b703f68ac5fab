-- The true current sizes of one lane, for the counters' recount. Bounded by what is live,
-- never by history:
--   pending: the rows after the lane's cursor (the two reads of list_pending.sql:
--     ready_claim from the cursor's position, and one probe per xid open at lo or hi),
--     without a cancel request;
--   running: attempts of the receipts that can hold an open one (after the rescue mark, or
--     named by a long lease; see list_claimed.sql) minus those closed in completions
--     (completions_receipt, one probe per receipt), with handed-over attempts counted from
--     long_leases (ADR 0008);
--   scheduled, dead: index scheduled_lane / dead_lane.
-- $1 lane
WITH cur AS MATERIALIZED (
    SELECT rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted,
           coalesce(pg_snapshot_xmax(rc.lo_snap), '1'::xid8) AS lo_xmax,
           coalesce(CASE WHEN rc.exhausted THEN pg_snapshot_xmax(rc.hi_snap)
                         ELSE rc.last_xid END, '0'::xid8) AS from_xid,
           coalesce(CASE WHEN rc.exhausted THEN 0 ELSE rc.last_seq END, 0) AS from_seq
      FROM (SELECT 1) one
      LEFT JOIN LATERAL (
          SELECT rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted
            FROM pgferry.receipts rc
           WHERE rc.lane = $1
           ORDER BY rc.receipt_id DESC
           LIMIT 1) rc ON true
),
after AS (
    SELECT r.job_id
      FROM cur c
      JOIN pgferry.ready r ON r.lane = $1 AND r.xid >= c.lo_xmax
                          AND (r.xid, r.seq) > (c.from_xid, c.from_seq)
),
open_xip AS (
    SELECT r.job_id
      FROM cur c
      CROSS JOIN LATERAL (SELECT pg_snapshot_xip(c.lo_snap)
                          UNION SELECT pg_snapshot_xip(c.hi_snap)) AS x(xid)
      JOIN pgferry.ready r ON r.lane = $1 AND r.xid = x.xid
     WHERE NOT (r.xid >= c.lo_xmax AND (r.xid, r.seq) > (c.from_xid, c.from_seq))
       AND NOT coalesce(pg_visible_in_snapshot(r.xid, c.lo_snap)
                        OR (pg_visible_in_snapshot(r.xid, c.hi_snap)
                            AND (c.exhausted OR (r.xid, r.seq) <= (c.last_xid, c.last_seq))),
                        false)
),
live AS MATERIALIZED (
    SELECT rc.receipt_id, cardinality(rc.job_ids) AS n
      FROM pgferry.receipts rc
     WHERE rc.lane = $1
       AND rc.receipt_id > least((SELECT ls.rescue_mark FROM pgferry.leader_state ls),
                                 (SELECT min(ll.receipt_id) - 1 FROM pgferry.long_leases ll
                                   WHERE ll.lane = $1 AND NOT ll.handed_over))
)
SELECT (SELECT count(*) FROM (SELECT job_id FROM after UNION ALL SELECT job_id FROM open_xip) p
         WHERE NOT EXISTS (SELECT 1 FROM pgferry.cancels x WHERE x.job_id = p.job_id))
           AS pending,
       (SELECT coalesce(sum(n), 0) FROM live)
         - (SELECT coalesce(sum(cardinality(c.job_ids)), 0)
              FROM pgferry.completions c
             WHERE c.receipt_id = ANY (ARRAY(SELECT l.receipt_id FROM live l)))
         -- Handed-over attempts (ADR 0008) never reach completions: the ones of live
         -- receipts are counted from long_leases instead, and so are those whose receipt
         -- is gone (index long_leases_handed, long_leases_handed_open).
         - (SELECT count(*) FROM pgferry.long_leases ll
             WHERE ll.handed_over AND ll.lane = $1
               AND ll.receipt_id = ANY (ARRAY(SELECT l.receipt_id FROM live l)))
         + (SELECT count(*) FROM pgferry.long_leases ll
             WHERE ll.handed_over AND ll.outcome IS NULL AND ll.lane = $1)
           AS running,
       (SELECT count(*) FROM pgferry.scheduled s WHERE s.lane = $1) AS scheduled,
       (SELECT count(*) FROM pgferry.dead d WHERE d.lane = $1) AS dead
