-- list_jobs, phase "claimed": the attempts a queue's claims handed out, newest claim first:
-- each lane's receipts backwards (receipts_cursor (lane, receipt_id DESC)), each receipt's
-- attempts from its last. Outcomes come from completions_receipt, one probe per receipt:
-- no per-job lookup in the log except to answer a kind/since filter or a failed attempt.
--
-- An attempt answers for its job when it is the job's last attempt in the log (as in
-- get_job); its state:
--   no outcome -> running; 1 -> completed; 4 -> cancelled;
--   otherwise, if the next attempt is in the log -> not answered here (it is listed where it
--   is); 3, 6 -> dead; 2, 5, 7 (a retry or snooze): waiting in `scheduled` -> not answered
--   here (the scheduled phase lists it), dead row -> dead, cancel request -> cancelled,
--   else scheduled (get_job's fallback).
-- $9 (running only): only receipts that can hold an open attempt are read: those after the
-- rescue mark (every receipt at or below it was closed by an outcome or rescued) or named
-- by a long lease of the lane.
--
-- Bounded: at most n = max($8, $4 / lanes) attempts per lane; the mark works as in list_pending.sql.
-- $1 queue, $2 cursor receipt id (NULL: from the newest), $3 cursor position in it,
-- $4 attempts to read, $5 kind (NULL: any), $6 enqueued since (NULL: any), $7 state
-- wanted (NULL: any), $8 answers wanted, $9 running only, $10 text in args or meta (lower
-- case; NULL: any)
WITH lanes AS MATERIALIZED (
    SELECT l.lane,
           CASE WHEN $9::bool
                THEN least((SELECT ls.rescue_mark FROM pgferry.leader_state ls),
                           (SELECT min(ll.receipt_id) - 1 FROM pgferry.long_leases ll
                             WHERE ll.lane = l.lane AND NOT ll.handed_over))
                ELSE 0 END AS lower
      FROM pgferry.queues q
      JOIN pgferry.lanes l ON l.queue_id = q.queue_id
     WHERE q.name = $1
),
lim AS (
    SELECT greatest($8::bigint, $4::bigint / greatest(count(*), 1)) AS n FROM lanes
),
cand AS MATERIALIZED (
    SELECT c.lane, x.*
      FROM lanes c
      CROSS JOIN LATERAL (
          SELECT y.* FROM (
            (SELECT rc.receipt_id, u.i, u.job_id, u.attempt, u.segment
               FROM pgferry.receipts rc,
                    unnest(rc.job_ids, rc.attempts, rc.job_segments) WITH ORDINALITY
                        AS u(job_id, attempt, segment, i)
              WHERE rc.lane = c.lane
                AND rc.receipt_id > c.lower
                AND ($2::bigint IS NULL OR rc.receipt_id <= $2)
                AND ($2::bigint IS NULL OR (rc.receipt_id, u.i) < ($2, $3::bigint))
              ORDER BY rc.receipt_id DESC, u.i DESC
              LIMIT (SELECT lim.n FROM lim))
            UNION ALL
            -- Attempts handed over to long_leases (ADR 0008) whose receipt was truncated
            -- since, at their place in it (running only: the open ones, whatever the mark).
            (SELECT ll.receipt_id, ll.receipt_pos::bigint, ll.job_id, ll.attempt, ll.segment
               FROM pgferry.long_leases ll
              WHERE ll.handed_over AND ll.lane = c.lane
                AND (NOT $9::bool OR ll.outcome IS NULL)
                AND ($2::bigint IS NULL OR (ll.receipt_id, ll.receipt_pos::bigint) < ($2, $3::bigint))
                AND NOT EXISTS (SELECT 1 FROM pgferry.receipts rc
                                 WHERE rc.lane = ll.lane AND rc.receipt_id = ll.receipt_id))
          ) y
          ORDER BY y.receipt_id DESC, y.i DESC
          LIMIT (SELECT lim.n FROM lim)) x
),
-- The candidates' own log rows, by block, when a filter needs them (kind, since, text): a
-- fresh job's row shares its segment, lane and transaction with its block's anchor and has
-- seq = job_id (ADR 0006, as ready_rows() finds one job), so one anchor probe (ready_by_id)
-- and one range of ready_claim (lane, xid, seq) read a whole block: a few probes per 256
-- candidates instead of two or three per candidate. Rows written any other way (by_id:
-- anchors, retries, promotions) are not here and are probed one by one below.
-- Both probes are LATERAL subqueries behind OFFSET 0, so that each is a nested-loop probe
-- per block: as plain joins, the generic plan of a freshly analyzed database hashed every
-- anchor of every partition (40,000 rows, 40,000 buffers, 480 ms at 10M jobs) to join the
-- page's 14 blocks.
blk AS MATERIALIZED (
    SELECT r.job_id, r.attempt, r.segment, r.kind, r.args, r.meta, r.enqueued_at
      FROM (SELECT DISTINCT c.segment, c.job_id & ~255::bigint AS anchor
              FROM cand c
             WHERE $5::text IS NOT NULL OR $6::timestamptz IS NOT NULL
                OR $10::text IS NOT NULL) b
      CROSS JOIN LATERAL (
          SELECT a.segment, a.lane, a.xid FROM pgferry.ready a
           WHERE a.by_id AND a.job_id = b.anchor AND a.segment = b.segment
          OFFSET 0) a
      CROSS JOIN LATERAL (
          SELECT r.* FROM pgferry.ready r
           WHERE r.segment = a.segment AND r.lane = a.lane AND r.xid = a.xid
             AND r.seq > b.anchor AND r.seq <= b.anchor + 255
             AND NOT r.by_id AND r.job_id = r.seq
          OFFSET 0) r
),
mark AS (
    SELECT m.receipt_id, m.i
      FROM (SELECT DISTINCT ON (c.lane) c.receipt_id, c.i,
                   count(*) OVER (PARTITION BY c.lane) AS n
              FROM cand c
             ORDER BY c.lane, c.receipt_id, c.i) m
     WHERE m.n >= (SELECT lim.n FROM lim)
     ORDER BY m.receipt_id DESC, m.i DESC
     LIMIT 1
),
outc AS MATERIALIZED (
    SELECT c.receipt_id, u.job_id, u.attempt, c.outcome
      FROM pgferry.completions c,
           unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
     WHERE c.receipt_id = ANY (ARRAY(SELECT DISTINCT x.receipt_id FROM cand x))
    -- Handed-over attempts (ADR 0008) have their outcome in long_leases.
    UNION ALL
    SELECT ll.receipt_id, ll.job_id, ll.attempt, ll.outcome
      FROM pgferry.long_leases ll
     WHERE ll.handed_over AND ll.outcome IS NOT NULL
       AND ll.receipt_id = ANY (ARRAY(SELECT DISTINCT x.receipt_id FROM cand x))
),
st AS (
    SELECT c.receipt_id, c.i, c.job_id,
           CASE
               WHEN o.outcome IS NULL THEN 'running'
               WHEN o.outcome = 1 THEN 'completed'
               WHEN o.outcome = 4 THEN 'cancelled'
               WHEN EXISTS (SELECT 1 FROM pgferry.ready_rows(c.job_id) r
                             WHERE r.attempt > c.attempt) THEN NULL
               WHEN o.outcome IN (3, 6) THEN 'dead'
               WHEN EXISTS (SELECT 1 FROM pgferry.scheduled s WHERE s.job_id = c.job_id)
                   THEN NULL
               WHEN EXISTS (SELECT 1 FROM pgferry.dead d WHERE d.job_id = c.job_id)
                   THEN 'dead'
               WHEN EXISTS (SELECT 1 FROM pgferry.cancels x WHERE x.job_id = c.job_id)
                   THEN 'cancelled'
               ELSE 'scheduled'
           END AS state,
           c.attempt, c.segment
      FROM cand c
      LEFT JOIN outc o
        ON o.receipt_id = c.receipt_id AND o.job_id = c.job_id AND o.attempt = c.attempt
     WHERE NOT EXISTS (SELECT 1 FROM mark m WHERE (c.receipt_id, c.i) < (m.receipt_id, m.i))
)
(SELECT false AS is_mark, s.job_id, s.receipt_id, s.i, s.state
   FROM st s
  WHERE s.state IS NOT NULL
    AND ($7::text IS NULL OR s.state = $7)
    AND (($5::text IS NULL AND $10::text IS NULL)
         -- Uncorrelated IN over blk: hashed subplans, one hash probe per candidate (a
         -- join to blk was planned as a nested loop over it per candidate).
         OR (s.job_id, s.attempt, s.segment) IN (
                SELECT b.job_id, b.attempt, b.segment FROM blk b
                 WHERE ($5::text IS NULL OR b.kind = $5)
                   AND ($10::text IS NULL
                        OR strpos(lower(b.args::text), $10) > 0
                        OR strpos(lower(coalesce(b.meta::text, '')), $10) > 0))
         OR (s.job_id, s.attempt, s.segment) NOT IN (
                SELECT b.job_id, b.attempt, b.segment FROM blk b)
            AND EXISTS (SELECT 1 FROM pgferry.ready_rows(s.job_id) r
                     WHERE r.segment = s.segment AND r.attempt = s.attempt
                       AND ($5::text IS NULL OR r.kind = $5)
                       AND ($10::text IS NULL OR (strpos(lower(r.args::text), $10) > 0 OR strpos(lower(coalesce(r.meta::text, '')), $10) > 0)))
         OR (s.job_id, s.attempt, s.segment) NOT IN (
                SELECT b.job_id, b.attempt, b.segment FROM blk b)
            AND EXISTS (SELECT 1 FROM pgferry.long_leases ll
                     WHERE ll.job_id = s.job_id AND ll.attempt = s.attempt AND ll.handed_over
                       AND ($5::text IS NULL OR ll.kind = $5)
                       AND ($10::text IS NULL OR (strpos(lower(ll.args::text), $10) > 0 OR strpos(lower(coalesce(ll.meta::text, '')), $10) > 0))))
    AND ($6::timestamptz IS NULL
         -- A first attempt's row found by block carries the job's enqueue time.
         OR (s.job_id, s.attempt, s.segment) IN (
                SELECT b.job_id, b.attempt, b.segment FROM blk b
                 WHERE b.attempt = 1 AND b.enqueued_at >= $6)
         OR (s.job_id, s.attempt, s.segment) NOT IN (
                SELECT b.job_id, b.attempt, b.segment FROM blk b WHERE b.attempt = 1)
            AND coalesce((SELECT r0.enqueued_at FROM pgferry.ready_rows(s.job_id) r0
                       ORDER BY r0.attempt LIMIT 1),
                     (SELECT l0.enqueued_at FROM pgferry.long_leases l0
                       WHERE l0.job_id = s.job_id AND l0.handed_over
                       ORDER BY l0.attempt LIMIT 1)) >= $6)
  ORDER BY s.receipt_id DESC, s.i DESC
  LIMIT $8)
UNION ALL
SELECT true, NULL, m.receipt_id, m.i, NULL FROM mark m
