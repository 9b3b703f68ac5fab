-- list_jobs, phase "pending": a queue's log rows that no claim has passed yet, newest first
-- in claim order read backwards. The claim order (xid, seq) appears here, in the cursor
-- and in jobs_detail.sql's claimed test, nowhere else in listing.
--
-- A row is pending when its lane's cursor (newest receipt: lo, hi, position, exhausted) has
-- not passed it (the claimed test of jobs_detail.sql). Such a row is either after the
-- cursor's position — xid >= lo.xmax and (xid, seq) > position, or xid >= hi.xmax when the
-- range is exhausted: one backward range of ready_claim (lane, xid, seq) per lane, every row
-- of which is pending — or in a transaction that was open at lo or hi (xip: one probe per
-- xid). So no lane's history is walked. A pending job with a cancel request is `cancelled`
-- (get_job says so too).
--
-- Bounded: at most n = max($8, $4 / lanes) rows per lane and part. A part that returned n
-- rows may have more below its lowest row; only rows at or above the highest such "mark"
-- are answered, and the caller continues below the mark. A final row with is_mark = true
-- carries the mark.
-- $1 queue, $2 cursor xid (text; NULL: from the newest), $3 cursor seq, $4 rows to read,
-- $5 kind (NULL: any), $6 enqueued since (NULL: any), $7 state wanted ('pending',
-- 'cancelled'; NULL: both), $8 answers wanted, $9 text in args or meta (lower case; NULL: any)
WITH lanes AS MATERIALIZED (
    SELECT l.lane, rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted,
           coalesce(pg_snapshot_xmax(rc.lo_snap), '1'::xid8) AS lo_xmax,
           coalesce(CASE WHEN rc.exhausted THEN pg_snapshot_xmax(rc.hi_snap)
                         ELSE rc.last_xid END, '0'::xid8) AS from_xid,
           coalesce(CASE WHEN rc.exhausted THEN 0 ELSE rc.last_seq END, 0) AS from_seq
      FROM pgferry.queues q
      JOIN pgferry.lanes l ON l.queue_id = q.queue_id
      LEFT JOIN LATERAL (
          SELECT rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted
            FROM pgferry.receipts rc
           WHERE rc.lane = l.lane
           ORDER BY rc.receipt_id DESC
           LIMIT 1) rc ON true
     WHERE q.name = $1
),
lim AS (
    SELECT greatest($8::bigint, $4::bigint / greatest(count(*), 1)) AS n FROM lanes
),
cand AS MATERIALIZED (
    SELECT c.lane, 1 AS part, r.*
      FROM lanes c
      CROSS JOIN LATERAL (
          SELECT r.job_id, r.attempt, r.xid, r.seq, r.kind, r.enqueued_at,
                 ($9::text IS NULL OR (strpos(lower(r.args::text), $9) > 0 OR strpos(lower(coalesce(r.meta::text, '')), $9) > 0)) AS text_ok
            FROM pgferry.ready r
           WHERE r.lane = c.lane
             AND r.xid >= c.lo_xmax
             AND (r.xid, r.seq) > (c.from_xid, c.from_seq)
             AND ($2::text IS NULL OR (r.xid, r.seq) < ($2::text::xid8, $3::bigint))
           ORDER BY r.xid DESC, r.seq DESC
           LIMIT (SELECT lim.n FROM lim)) r
    UNION ALL
    SELECT c.lane, 2 AS part, r.*
      FROM lanes c
      CROSS JOIN LATERAL (
          SELECT r.job_id, r.attempt, r.xid, r.seq, r.kind, r.enqueued_at,
                 ($9::text IS NULL OR (strpos(lower(r.args::text), $9) > 0 OR strpos(lower(coalesce(r.meta::text, '')), $9) > 0)) AS text_ok
            FROM (SELECT pg_snapshot_xip(c.lo_snap)
                  UNION SELECT pg_snapshot_xip(c.hi_snap)) AS x(xid)
            JOIN pgferry.ready r ON r.lane = c.lane AND r.xid = x.xid
           WHERE NOT (r.xid >= c.lo_xmax AND (r.xid, r.seq) > (c.from_xid, c.from_seq))
             AND ($2::text IS NULL OR (r.xid, r.seq) < ($2::text::xid8, $3::bigint))
           ORDER BY r.xid DESC, r.seq DESC
           LIMIT (SELECT lim.n FROM lim)) r
),
mark AS (
    SELECT m.xid, m.seq
      FROM (SELECT DISTINCT ON (c.lane, c.part) c.xid, c.seq,
                   count(*) OVER (PARTITION BY c.lane, c.part) AS n
              FROM cand c
             ORDER BY c.lane, c.part, c.xid, c.seq) m
     WHERE m.n >= (SELECT lim.n FROM lim)
     ORDER BY m.xid DESC, m.seq DESC
     LIMIT 1
),
st AS (
    SELECT c.job_id, c.xid, c.seq,
           CASE WHEN EXISTS (SELECT 1 FROM pgferry.cancels x WHERE x.job_id = c.job_id)
                THEN 'cancelled' ELSE 'pending' END AS state
      FROM cand c
      JOIN lanes l ON l.lane = c.lane
     WHERE NOT coalesce(pg_visible_in_snapshot(c.xid, l.lo_snap)
                        OR (pg_visible_in_snapshot(c.xid, l.hi_snap)
                            AND (l.exhausted OR (c.xid, c.seq) <= (l.last_xid, l.last_seq))),
                        false)
       AND NOT EXISTS (SELECT 1 FROM mark m WHERE (c.xid, c.seq) < (m.xid, m.seq))
       AND ($5::text IS NULL OR c.kind = $5)
       AND c.text_ok
       AND ($6::timestamptz IS NULL
            OR CASE WHEN c.attempt = 1 THEN c.enqueued_at
                    ELSE (SELECT r0.enqueued_at FROM pgferry.ready_rows(c.job_id) r0
                           ORDER BY r0.attempt LIMIT 1) END >= $6)
)
(SELECT false AS is_mark, s.job_id, s.xid::text, s.seq, s.state
   FROM st s
  WHERE $7::text IS NULL OR s.state = $7
  ORDER BY s.xid DESC, s.seq DESC
  LIMIT $8)
UNION ALL
SELECT true, NULL, m.xid::text, m.seq, NULL FROM mark m
