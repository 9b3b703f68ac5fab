-- claim_lanes(lanes, max, worker, lease_ms): claims up to `max` jobs over the given lanes in
-- order (DESIGN §3.1-3.2; docs/architecture.md), set-based: no per-row plpgsql loop and no
-- per-lane function layer (each layer copied every row into one more tuplestore). For each
-- lane in turn plpgsql takes the lane lock, reads the cursor with a snapshot taken after the
-- lock (a later statement of a VOLATILE function), and picks the ranges; ONE statement then
-- reads the rows, appends the receipt, closes cancelled jobs and returns the rest.
--
-- A call reads at most two ranges: the rest of the cursor's range (range 1, unless it is
-- exhausted), then (cursor.hi, latest tick] (range 2, if a newer tick exists). Each range is
-- two index reads of ready_claim (lane, xid, seq), in claim order (xid, seq):
--   xip step: the transactions in progress at lo that committed by hi (so rows of one still
--             running are never read), each probed by equality on (lane, xid) through a
--             LATERAL: an equality always lands in the Index Cond, whereas `xid = ANY(array)`
--             in a generic plan over a partition with stale statistics became a filter over
--             the whole lane (ADR 0002 §5). Sorted afterwards (few rows);
--   range step: lo.xmax <= xid < hi.xmax — Merge Append of index scans, stops at LIMIT.
-- Never `xid >= lo.xmin`: an old open transaction would make every claim rescan everything
-- since it began. The four parts are appended in claim order and the Append stops pulling
-- once the rows still needed came through.
CREATE OR REPLACE FUNCTION pgferry.claim_lanes(p_lanes int[], p_max int, p_worker text,
                                               p_lease_ms int)
RETURNS TABLE (receipt_id bigint, job_id bigint, attempt int, job_segment smallint,
               max_attempts int, kind text, args jsonb, meta jsonb, enqueued_at timestamptz,
               receipt_segment smallint, lane int)
LANGUAGE plpgsql VOLATILE
-- Every statement has an index made for it; a reused segment's statistics are stale.
SET enable_seqscan = off
-- The range steps must stay Merge Appends under LIMIT, never a sort of the whole range; the
-- xip steps sort after their fence regardless (no other plan exists for them).
SET enable_sort = off
-- Planning four index reads over 16 partitions on every call would cost more than running
-- them; the generic plan is the same shape for any parameter values.
SET plan_cache_mode = force_generic_plan
-- enable_sort = off inflates cost estimates past jit_above_cost; compiling this statement
-- would take seconds (pgferry's own sessions run with jit off anyway, ADR 0002 §3).
SET jit = off
AS $fn$
DECLARE
    p_lane      int;
    v_need      int := p_max;
    v_n         bigint;
    v_lo1       pg_snapshot;
    v_hi1       pg_snapshot;
    v_tick1     bigint;
    v_last_xid  xid8;
    v_last_seq  bigint;
    v_exhausted boolean;
    v_hi2       pg_snapshot;
    v_tick2     bigint;
    v_xip1      xid8[] := '{}';
    v_xip2      xid8[] := '{}';
    v_cancels   boolean;
    v_latest    bigint;
    v_latest_hi pg_snapshot;
BEGIN
  -- The latest tick, once per call: index ticks_id, Limit over Merge Append. Read before
  -- any lane lock, it may be older than a cursor another claimer just moved; such a lane
  -- then has no range 2 in this call (below), which is only conservative.
  SELECT t.tick_id, t.snap INTO v_latest, v_latest_hi
    FROM pgferry.ticks t ORDER BY t.tick_id DESC LIMIT 1;
  -- One probe per call; per-row probes only while some cancellation is pending.
  v_cancels := EXISTS (SELECT 1 FROM pgferry.cancels);
  -- Lanes in the caller's order (priority order, shards rotated) until the batch is full.
  FOREACH p_lane IN ARRAY p_lanes LOOP
    EXIT WHEN v_need <= 0;
    -- One claimer per lane at a time; the others move on to other lanes instead of waiting.
    CONTINUE WHEN NOT pg_try_advisory_xact_lock(7266, p_lane);
    v_exhausted := NULL; v_xip1 := '{}'; v_xip2 := '{}'; v_tick2 := NULL; v_hi2 := NULL;
    -- The cursor: index receipts_cursor (lane, receipt_id DESC), one probe per partition.
    SELECT r.lo_snap, r.hi_snap, r.hi_tick, r.last_xid, r.last_seq, r.exhausted
      INTO v_lo1, v_hi1, v_tick1, v_last_xid, v_last_seq, v_exhausted
      FROM pgferry.receipts r
     WHERE r.lane = p_lane
     ORDER BY r.receipt_id DESC
     LIMIT 1;
    IF NOT FOUND THEN
        -- A lane never claimed starts below every real xid (3 = FirstNormalTransactionId).
        v_hi1 := '3:3:'; v_tick1 := 0; v_exhausted := true;
    END IF;
    -- The next range, if a newer tick exists.
    v_tick2 := v_latest; v_hi2 := v_latest_hi;
    IF v_tick2 IS NULL OR v_tick2 <= v_tick1 THEN
        CONTINUE WHEN v_exhausted;   -- nothing new in this lane: an idle claim writes nothing
        v_tick2 := NULL; v_hi2 := NULL;
    ELSE
        v_xip2 := ARRAY(SELECT x FROM pg_snapshot_xip(v_hi1) x
                         WHERE pg_visible_in_snapshot(x, v_hi2));
    END IF;
    IF v_exhausted THEN
        v_lo1 := NULL;   -- no current range: only range 2 is read
    ELSIF v_last_xid < pg_snapshot_xmax(v_lo1) THEN
        v_xip1 := ARRAY(SELECT x FROM pg_snapshot_xip(v_lo1) x
                         WHERE pg_visible_in_snapshot(x, v_hi1));
    END IF;
    -- Nothing to take in this lane: its own range is done, no transaction of the xip step
    -- needs a look, and range 2 holds no row. The common case with several shards at light
    -- load, where the tick that woke the claimer came from another lane's job. The claim
    -- statement would find no row and write nothing (no row, no receipt), but its executor
    -- start-up over every part of the plan costs several times this one index probe
    -- (docs/performance.md, "The ticker's statement prepared once; empty lanes skipped").
    -- Conservative: a row of a transaction still running at hi2 counts as something to look
    -- at.
    IF v_exhausted AND cardinality(v_xip2) = 0 AND NOT EXISTS (
           SELECT 1 FROM pgferry.ready r
            WHERE r.lane = p_lane
              AND r.xid >= pg_snapshot_xmax(v_hi1) AND r.xid < pg_snapshot_xmax(v_hi2)) THEN
        CONTINUE;
    END IF;

    -- The common case at light load, and whenever a claimer keeps up: the lane's own range
    -- is done, no transaction of the xip step needs a look and no cancellation is pending,
    -- so only range 2's range step can return rows. The general statement below would give
    -- the same rows and the same receipt, but its executor start-up initialises all four
    -- parts, the cancellation probe and the completions insert on every call: that start-up
    -- was most of a light-load claim (docs/performance.md, "A claim of range 2 alone").
    IF v_exhausted AND cardinality(v_xip2) = 0 AND NOT v_cancels THEN
        RETURN QUERY
        WITH c AS MATERIALIZED (   -- claim: range 2 alone
            SELECT r.*, row_number() OVER () AS n
              FROM (SELECT r.job_id, r.attempt, r.segment, r.max_attempts, r.kind, r.args,
                           r.meta, r.enqueued_at, r.xid, r.seq
                      FROM pgferry.ready r
                     WHERE r.lane = p_lane
                       AND r.xid >= pg_snapshot_xmax(v_hi1) AND r.xid < pg_snapshot_xmax(v_hi2)
                       AND pg_visible_in_snapshot(r.xid, v_hi2)
                     ORDER BY r.xid, r.seq
                     LIMIT v_need) r
        ),
        rec AS (
            INSERT INTO pgferry.receipts (receipt_id, segment, lane, lo_snap, hi_snap, hi_tick,
                                          last_xid, last_seq, exhausted, job_ids, attempts,
                                          job_segments, worker, lease_until)
            SELECT nextval('pgferry.receipt_seq'),
                   (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
                   p_lane, v_hi1, v_hi2, v_tick2, l.xid, l.seq, l.n < v_need,
                   a.job_ids, a.attempts, a.segments,
                   p_worker, now() + p_lease_ms * interval '1 millisecond'
              FROM (SELECT c.xid, c.seq, c.n FROM c ORDER BY c.n DESC LIMIT 1) l,
                   (SELECT array_agg(c.job_id) AS job_ids, array_agg(c.attempt) AS attempts,
                           array_agg(c.segment) AS segments FROM c) a
            RETURNING receipts.receipt_id, receipts.segment
        )
        SELECT rec.receipt_id, c.job_id, c.attempt, c.segment, c.max_attempts, c.kind, c.args,
               c.meta, c.enqueued_at, rec.segment, p_lane
          FROM rec, c;
    ELSE
        RETURN QUERY
        WITH c AS MATERIALIZED (
            SELECT p.*, row_number() OVER () AS n,
                   v_cancels AND EXISTS (SELECT 1 FROM pgferry.cancels x
                                          WHERE x.job_id = p.job_id) AS cancelled
              FROM (
                (SELECT 1 AS part, r.*
                   FROM unnest(v_xip1) AS x(xid)
                   CROSS JOIN LATERAL (
                       SELECT r.job_id, r.attempt, r.segment, r.max_attempts, r.kind, r.args,
                              r.meta, r.enqueued_at, r.xid, r.seq
                         FROM pgferry.ready r
                        WHERE r.lane = p_lane AND r.xid = x.xid
                          AND (r.xid, r.seq) > (v_last_xid, v_last_seq)
                        ORDER BY r.seq
                        LIMIT v_need) r
                  ORDER BY r.xid, r.seq
                  LIMIT v_need)
                UNION ALL
                (SELECT 1, r.job_id, r.attempt, r.segment, r.max_attempts, r.kind, r.args,
                        r.meta, r.enqueued_at, r.xid, r.seq
                   FROM pgferry.ready r
                  WHERE v_lo1 IS NOT NULL
                    AND r.lane = p_lane
                    AND r.xid >= pg_snapshot_xmax(v_lo1) AND r.xid < pg_snapshot_xmax(v_hi1)
                    AND (r.xid, r.seq) > (v_last_xid, v_last_seq)
                    AND pg_visible_in_snapshot(r.xid, v_hi1)
                  ORDER BY r.xid, r.seq
                  LIMIT v_need)
                UNION ALL
                (SELECT 2, r.*
                   FROM unnest(v_xip2) AS x(xid)
                   CROSS JOIN LATERAL (
                       SELECT r.job_id, r.attempt, r.segment, r.max_attempts, r.kind, r.args,
                              r.meta, r.enqueued_at, r.xid, r.seq
                         FROM pgferry.ready r
                        WHERE r.lane = p_lane AND r.xid = x.xid
                        ORDER BY r.seq
                        LIMIT v_need) r
                  ORDER BY r.xid, r.seq
                  LIMIT v_need)
                UNION ALL
                (SELECT 2, r.job_id, r.attempt, r.segment, r.max_attempts, r.kind, r.args,
                        r.meta, r.enqueued_at, r.xid, r.seq
                   FROM pgferry.ready r
                  WHERE v_hi2 IS NOT NULL
                    AND r.lane = p_lane
                    AND r.xid >= pg_snapshot_xmax(v_hi1) AND r.xid < pg_snapshot_xmax(v_hi2)
                    AND pg_visible_in_snapshot(r.xid, v_hi2)
                  ORDER BY r.xid, r.seq
                  LIMIT v_need)
                LIMIT v_need
              ) p
        ),
        -- Where the cursor ends: if the batch is full, at its last row (in that row's range);
        -- otherwise everything visible was taken, so at the end of the latest range.
        tail AS (
            SELECT l.total < v_need AS exhausted,
                   v_hi2 IS NOT NULL AND (l.total < v_need OR l.part = 2) AS in2,
                   l.part, l.xid, l.seq
              FROM (SELECT c.part, c.xid, c.seq, c.n AS total FROM c ORDER BY c.n DESC LIMIT 1) l
        ),
        rec AS (
            INSERT INTO pgferry.receipts (receipt_id, segment, lane, lo_snap, hi_snap, hi_tick,
                                          last_xid, last_seq, exhausted, job_ids, attempts,
                                          job_segments, worker, lease_until)
            SELECT nextval('pgferry.receipt_seq'),
                   -- The receipt's segment travels with each job so that outcomes find the
                   -- receipt with one index probe in one partition.
                   (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
                   p_lane,
                   CASE WHEN t.in2 THEN v_hi1 ELSE v_lo1 END,
                   CASE WHEN t.in2 THEN v_hi2 ELSE v_hi1 END,
                   CASE WHEN t.in2 THEN v_tick2 ELSE v_tick1 END,
                   CASE WHEN t.in2 AND t.part = 1 THEN '0'::xid8 ELSE t.xid END,
                   CASE WHEN t.in2 AND t.part = 1 THEN 0 ELSE t.seq END,
                   t.exhausted, a.job_ids, a.attempts, a.segments,
                   p_worker, now() + p_lease_ms * interval '1 millisecond'
              -- The arrays are sets (what the receipt holds), so no ORDER BY: no sorts.
              FROM tail t,
                   (SELECT array_agg(c.job_id) AS job_ids, array_agg(c.attempt) AS attempts,
                           array_agg(c.segment) AS segments FROM c) a
            RETURNING receipts.receipt_id, receipts.segment
        ),
        -- Cancelled jobs met by this claim: taken (the cursor moves past them) and closed with
        -- outcome 4 under the new receipt, which nobody else knows yet, so no lock is needed.
        closed AS (
            INSERT INTO pgferry.completions (segment, receipt_id, outcome, job_ids, attempts, errors)
            SELECT c.segment, rec.receipt_id, 4, array_agg(c.job_id), array_agg(c.attempt),
                   array_agg('cancelled'::text)
              FROM c, rec
             WHERE c.cancelled
             GROUP BY c.segment, rec.receipt_id
        )
        -- Rows leave in claim order: the CTE's order (no sort; rec is a single row).
        SELECT rec.receipt_id, c.job_id, c.attempt, c.segment, c.max_attempts, c.kind, c.args,
               c.meta, c.enqueued_at, rec.segment, p_lane
          FROM rec, c
         WHERE NOT c.cancelled;
    END IF;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_need := v_need - v_n;
  END LOOP;
END
$fn$;
