-- The hot path on a diet (ADR 0006): COPY enqueue without a per-row job_id index, a
-- set-based claim, and a completion statement that does only what a batch needs.
--
-- Measured WAL per enqueued row (same 100-row batches, one cluster; docs/performance.md):
-- INSERT with the (lane, xid, seq) and (job_id) B-trees 351 B; without the job_id B-tree
-- 285 B; COPY without it 224 B; the append-only reference 185 B.

-- 1. Finding a job's rows without indexing every row by job id ----------------------------
-- Fresh jobs are written by COPY with ids the engine reserved in blocks of 256 (one block per
-- lane of a batch), and with seq = job_id. Only the first row of each block (its "anchor") is
-- indexed by id; any other fresh row is found from its anchor, which shares its segment,
-- lane and transaction: ready_claim (lane, xid, seq = job_id) then finds it exactly.
-- Every row written any other way (retries, promotions, DLQ retries, rescues, unique and
-- scheduled enqueues, and all rows from before this migration) keeps by_id = true.
ALTER TABLE pgferry.ready ADD COLUMN by_id boolean NOT NULL DEFAULT true;
CREATE INDEX ready_by_id ON pgferry.ready (job_id) WHERE by_id;
DROP INDEX pgferry.ready_job;

-- Ids are handed out in blocks: every nextval is a multiple of 256 and owns the 256 ids
-- from it. Statements that take one id per job (unique and scheduled enqueues) simply use
-- the first id of a block. 2^53 / 256 blocks last a century at 10k blocks/s, and ids stay
-- exact as JSON numbers.
SELECT setval('pgferry.job_id_seq',
              ((SELECT last_value FROM pgferry.job_id_seq) / 256 + 1) * 256, false);
ALTER SEQUENCE pgferry.job_id_seq INCREMENT BY 256;

-- The rows of one job, in any segment: by_id rows through ready_by_id, a fresh non-anchor
-- row through its block's anchor (two index probes per partition, pruned at run time when
-- the caller also names the segment). Inlined by the planner (one SELECT, STABLE, SQL).
CREATE FUNCTION pgferry.ready_rows(p_job_id bigint)
RETURNS SETOF pgferry.ready
LANGUAGE sql STABLE AS $fn$
    SELECT r.* FROM pgferry.ready r WHERE r.by_id AND r.job_id = p_job_id
    UNION ALL
    SELECT r.*
      FROM pgferry.ready a
      JOIN pgferry.ready r
        ON r.segment = a.segment AND r.lane = a.lane AND r.xid = a.xid
       AND r.seq = p_job_id AND r.job_id = p_job_id AND NOT r.by_id
     WHERE a.by_id AND a.job_id = p_job_id & ~255::bigint AND p_job_id & 255 <> 0
$fn$;

-- Receipts and completions carry per-job arrays (8-14 bytes per job). pglz compressing
-- them was 5% of a claim's CPU (perf); keep rows up to a page inline and uncompressed, and
-- use lz4 for bigger ones.
-- (The parents get it for partitions created later; PG15 does not recurse to existing ones.)
DO $$
DECLARE
    s int;
    r text;
    c text;
BEGIN
    FOR s IN -1..15 LOOP
        -- Names are built from our own ring numbers, not from input; -1 is the parent.
        r := CASE WHEN s < 0 THEN 'receipts' ELSE 'receipts_' || lpad(s::text, 2, '0') END;
        c := CASE WHEN s < 0 THEN 'completions' ELSE 'completions_' || lpad(s::text, 2, '0') END;
        EXECUTE format('ALTER TABLE pgferry.%I ALTER COLUMN job_ids SET COMPRESSION lz4, '
                       'ALTER COLUMN attempts SET COMPRESSION lz4, '
                       'ALTER COLUMN job_segments SET COMPRESSION lz4', r);
        EXECUTE format('ALTER TABLE pgferry.%I ALTER COLUMN job_ids SET COMPRESSION lz4, '
                       'ALTER COLUMN attempts SET COMPRESSION lz4, '
                       'ALTER COLUMN errors SET COMPRESSION lz4, '
                       'ALTER COLUMN durations SET COMPRESSION lz4', c);
        IF s >= 0 THEN
            EXECUTE format('ALTER TABLE pgferry.%I SET (toast_tuple_target = 8160)', r);
            EXECUTE format('ALTER TABLE pgferry.%I SET (toast_tuple_target = 8160)', c);
        END IF;
    END LOOP;
END $$;

-- 2. claim_lanes(lanes, max, worker, lease_ms), set-based --------------------------------
-- Same contract as in 0001 (DESIGN §3.1-3.2), without a per-row plpgsql loop and without the
-- per-lane function layer (each layer copied every row into one more tuplestore): for each
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
BEGIN
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
    -- The next range, if a newer tick exists: index ticks_id, Limit over Merge Append.
    SELECT t.tick_id, t.snap INTO v_tick2, v_hi2
      FROM pgferry.ticks t ORDER BY t.tick_id DESC LIMIT 1;
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
    -- One probe per claim; per-row probes only while some cancellation is pending.
    v_cancels := EXISTS (SELECT 1 FROM pgferry.cancels);

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
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_need := v_need - v_n;
  END LOOP;
END
$fn$;

-- claim(lane, ...): one lane (tests, tools); the engine calls claim_lanes.
CREATE OR REPLACE FUNCTION pgferry.claim(p_lane int, p_max int, p_worker text, p_lease_ms int)
RETURNS TABLE (receipt_id bigint, job_id bigint, attempt int, job_segment smallint,
               max_attempts int, kind text, args jsonb, meta jsonb, enqueued_at timestamptz,
               receipt_segment smallint)
LANGUAGE sql VOLATILE AS $fn$
    SELECT c.receipt_id, c.job_id, c.attempt, c.job_segment, c.max_attempts, c.kind, c.args,
           c.meta, c.enqueued_at, c.receipt_segment
      FROM pgferry.claim_lanes(ARRAY[p_lane], p_max, p_worker, p_lease_ms) c
$fn$;

-- 3. complete(): unchanged but for the failure path, which finds the job row through
-- ready_rows() now that ready_job is gone (one anchor or by_id probe per failed attempt).
CREATE OR REPLACE FUNCTION pgferry.complete(
    p_job_ids bigint[], p_attempts int[], p_segments smallint[], p_receipts bigint[],
    p_lanes int[], p_rsegs smallint[], p_outcomes smallint[], p_errors text[],
    p_delays bigint[], p_results jsonb[], p_durations int[])
RETURNS TABLE (ord bigint, won boolean)
LANGUAGE plpgsql VOLATILE
-- As in claim(): partitions reused after TRUNCATE have stale statistics; every lookup here
-- has its index. Generic plans: re-planning this statement over 16 partitions of four tables
-- cost 0.7 ms per call, three times its execution (measured with auto_explain, 200 outcomes);
-- every probe in it is written to be a probe under any estimate, with run-time pruning.
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $fn$
DECLARE
    v_receipts bigint[];
    v_segments smallint[];
    v_whole    bigint;
BEGIN
    -- The batch names a handful of receipts and segments, not 200: probe each once.
    v_receipts := ARRAY(SELECT DISTINCT r FROM unnest(p_receipts) r ORDER BY 1);
    v_segments := ARRAY(SELECT DISTINCT s FROM unnest(p_segments) s);
    PERFORM pg_advisory_xact_lock(7267, (r & 2147483647)::int) FROM unnest(v_receipts) r;

    -- A worker reporting its whole claimed batch, all successes, in claim order: the batch
    -- IS one receipt's arrays. Array equality proves every attempt is held, one probe that
    -- nothing of the receipt is closed yet (after the lock: a fresh snapshot), and the
    -- completion row is the arrays themselves — no per-outcome work at all. Batches with
    -- results, failures, other receipts, or queues under a concurrency limit take the
    -- set-based paths below.
    IF cardinality(v_receipts) = 1 AND cardinality(v_segments) = 1 AND 1 = ALL (p_outcomes)
       AND p_results IS NULL AND NOT EXISTS (SELECT 1 FROM pgferry.queue_running) THEN
        INSERT INTO pgferry.completions (segment, receipt_id, outcome, job_ids, attempts,
                                         durations)
        SELECT p_segments[1], rc.receipt_id, 1, p_job_ids, p_attempts, p_durations
          FROM pgferry.receipts rc
         WHERE rc.segment = p_rsegs[1] AND rc.lane = p_lanes[1]
           AND rc.receipt_id = p_receipts[1]
           AND rc.job_ids = p_job_ids AND rc.attempts = p_attempts
           AND rc.job_segments = p_segments
           AND NOT EXISTS (SELECT 1 FROM pgferry.completions c
                            WHERE c.receipt_id = p_receipts[1] AND c.segment = p_segments[1]);
        GET DIAGNOSTICS v_whole = ROW_COUNT;
        IF v_whole = 1 THEN
            RETURN QUERY SELECT g::bigint, true FROM generate_series(1, cardinality(p_job_ids)) g;
            RETURN;
        END IF;
    END IF;

    -- The common batch: only successes. Plpgsql plans each RETURN QUERY on first use, so this
    -- statement's plan has no retry, dead-letter or job-row nodes at all — initialising them
    -- over every partition cost more than executing the statement (perf).
    IF 1 = ALL (p_outcomes) THEN
        RETURN QUERY
        WITH o AS (
            SELECT *
              FROM unnest(p_job_ids, p_attempts, p_segments, p_receipts, p_lanes, p_rsegs,
                          p_results, p_durations)
                   WITH ORDINALITY AS o(job_id, attempt, segment, receipt_id, lane, rseg,
                                        result, duration_ms, ord)
        ),
        -- As below: the receipts named (receipts_cursor, one partition each), the attempts of
        -- theirs already closed (completions_receipt), first outcome per attempt wins.
        held AS (
            SELECT k.receipt_id, u.job_id, u.attempt, u.segment
              FROM (SELECT DISTINCT o.receipt_id, o.lane, o.rseg FROM o) k
              CROSS JOIN LATERAL (
                  SELECT rc.job_ids, rc.attempts, rc.job_segments
                    FROM pgferry.receipts rc
                   WHERE rc.segment = k.rseg AND rc.lane = k.lane
                     AND rc.receipt_id = k.receipt_id
                   LIMIT 1) r,
              unnest(r.job_ids, r.attempts, r.job_segments) AS u(job_id, attempt, segment)
        ),
        closed AS (
            SELECT c.receipt_id, u.job_id, u.attempt
              FROM pgferry.completions c,
                   unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
             WHERE c.receipt_id = ANY (v_receipts) AND c.segment = ANY (v_segments)
        ),
        win AS (
            SELECT DISTINCT ON (o.job_id, o.attempt) o.*
              FROM o
             WHERE (o.receipt_id, o.job_id, o.attempt, o.segment)
                       IN (SELECT h.receipt_id, h.job_id, h.attempt, h.segment FROM held h)
               AND (o.receipt_id, o.job_id, o.attempt)
                       NOT IN (SELECT c.receipt_id, c.job_id, c.attempt FROM closed c)
             ORDER BY o.job_id, o.attempt, o.ord
        ),
        done AS (
            INSERT INTO pgferry.completions (segment, receipt_id, outcome, job_ids, attempts,
                                             durations)
            SELECT w.segment, w.receipt_id, 1, array_agg(w.job_id), array_agg(w.attempt),
                   CASE WHEN bool_or(w.duration_ms IS NOT NULL)
                        THEN array_agg(w.duration_ms) END
              FROM win w
             GROUP BY w.segment, w.receipt_id
        ),
        kept AS (
            INSERT INTO pgferry.results (segment, job_id, attempt, result)
            SELECT w.segment, w.job_id, w.attempt, w.result
              FROM win w WHERE w.result IS NOT NULL
        ),
        freed AS (
            UPDATE pgferry.queue_running qr
               SET running = greatest(0, qr.running - d.n)
              FROM (SELECT l.queue_id, count(*)::int AS n
                      FROM win w JOIN pgferry.lanes l ON l.lane = w.lane
                     WHERE EXISTS (SELECT 1 FROM pgferry.queue_running)
                     GROUP BY l.queue_id) d
             WHERE qr.queue_id = d.queue_id
        )
        -- A hashed SubPlan: `ord = ANY(array of winners)` was quadratic in the batch.
        SELECT o.ord, o.ord IN (SELECT w.ord FROM win w)
          FROM o
         ORDER BY o.ord;
        RETURN;
    END IF;

    RETURN QUERY
    WITH o AS (
        SELECT *
          FROM unnest(p_job_ids, p_attempts, p_segments, p_receipts, p_lanes, p_rsegs,
                      p_outcomes, p_errors, p_delays, p_results, p_durations)
               WITH ORDINALITY AS o(job_id, attempt, segment, receipt_id, lane, rseg, outcome,
                                    error, delay_ms, result, duration_ms, ord)
    ),
    -- The receipts named: one probe of receipts_cursor (lane, receipt_id) in the receipt's
    -- partition each. An outcome whose receipt does not hold its attempt is stale.
    held AS (
        SELECT k.receipt_id, u.job_id, u.attempt, u.segment
          FROM (SELECT DISTINCT o.receipt_id, o.lane, o.rseg FROM o) k
          CROSS JOIN LATERAL (
              SELECT rc.job_ids, rc.attempts, rc.job_segments
                FROM pgferry.receipts rc
               WHERE rc.segment = k.rseg AND rc.lane = k.lane AND rc.receipt_id = k.receipt_id
               LIMIT 1) r,
          unnest(r.job_ids, r.attempts, r.job_segments) AS u(job_id, attempt, segment)
    ),
    -- Attempts of those receipts closed already: index completions_receipt.
    closed AS (
        SELECT c.receipt_id, u.job_id, u.attempt
          FROM pgferry.completions c,
               unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
         WHERE c.receipt_id = ANY (v_receipts) AND c.segment = ANY (v_segments)
    ),
    -- One winner per attempt (the first in the batch); both filters are hashed SubPlans,
    -- linear in the batch, whatever the row estimates of the CTEs.
    win AS (
        SELECT DISTINCT ON (o.job_id, o.attempt) o.*
          FROM o
         WHERE (o.receipt_id, o.job_id, o.attempt, o.segment)
                   IN (SELECT h.receipt_id, h.job_id, h.attempt, h.segment FROM held h)
           AND (o.receipt_id, o.job_id, o.attempt)
                   NOT IN (SELECT c.receipt_id, c.job_id, c.attempt FROM closed c)
         ORDER BY o.job_id, o.attempt, o.ord
    ),
    done AS (
        INSERT INTO pgferry.completions (segment, receipt_id, outcome, job_ids, attempts,
                                         errors, durations)
        SELECT w.segment, w.receipt_id, w.outcome,
               array_agg(w.job_id ORDER BY w.ord), array_agg(w.attempt ORDER BY w.ord),
               CASE WHEN bool_or(w.error IS NOT NULL) THEN array_agg(w.error ORDER BY w.ord) END,
               CASE WHEN bool_or(w.duration_ms IS NOT NULL)
                    THEN array_agg(w.duration_ms ORDER BY w.ord) END
          FROM win w
         GROUP BY w.segment, w.receipt_id, w.outcome
    ),
    kept AS (
        INSERT INTO pgferry.results (segment, job_id, attempt, result)
        SELECT w.segment, w.job_id, w.attempt, w.result
          FROM win w WHERE w.outcome = 1 AND w.result IS NOT NULL
    ),
    -- Free the concurrency slots of limited queues (queue_running, migration 0003). The
    -- EXISTS is an InitPlan: with no limited queue, the join to lanes never runs.
    freed AS (
        UPDATE pgferry.queue_running qr
           SET running = greatest(0, qr.running - d.n)
          FROM (SELECT l.queue_id, count(*)::int AS n
                  FROM win w JOIN pgferry.lanes l ON l.lane = w.lane
                 WHERE EXISTS (SELECT 1 FROM pgferry.queue_running)
                 GROUP BY l.queue_id) d
         WHERE qr.queue_id = d.queue_id
    ),
    -- Failures need the job itself: ready_rows() probes in the attempt's own partition, only
    -- for retries and dead letters (LATERAL ... LIMIT 1 stays a probe under any estimate).
    failed AS (
        SELECT w.*, r.lane AS job_lane, r.max_attempts, r.kind, r.args, r.meta
          FROM win w
          CROSS JOIN LATERAL (
              SELECT r.lane, r.max_attempts, r.kind, r.args, r.meta
                FROM pgferry.ready_rows(w.job_id) r
               WHERE r.segment = w.segment AND r.attempt = w.attempt
               LIMIT 1) r
         WHERE w.outcome IN (2, 3, 7)
    ),
    again AS (
        INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
        SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
               f.job_lane, f.job_id, f.attempt + 1,
               -- A snooze (7) does not use up an attempt.
               f.max_attempts + (f.outcome = 7)::int, f.kind, f.args, f.meta
          FROM failed f WHERE f.outcome IN (2, 7) AND coalesce(f.delay_ms, 0) <= 0
    ),
    later AS (
        INSERT INTO pgferry.scheduled (job_id, lane, attempt, max_attempts, kind, args, meta, run_at)
        SELECT f.job_id, f.job_lane, f.attempt + 1, f.max_attempts + (f.outcome = 7)::int,
               f.kind, f.args, f.meta, now() + f.delay_ms * interval '1 millisecond'
          FROM failed f WHERE f.outcome IN (2, 7) AND f.delay_ms > 0
    ),
    buried AS (
        INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, meta, error)
        SELECT f.job_id, f.job_lane, f.attempt, f.max_attempts, f.kind, f.args, f.meta, f.error
          FROM failed f WHERE f.outcome = 3
        ON CONFLICT (job_id) DO UPDATE
           SET attempt = EXCLUDED.attempt, error = EXCLUDED.error, died_at = now()
    )
    -- A hashed SubPlan (0001 compared each outcome with an array of all winners: quadratic).
    SELECT o.ord, o.ord IN (SELECT w.ord FROM win w)
      FROM o
     ORDER BY o.ord;
END
$fn$;

-- 4. lane_head_age(lanes): how long the oldest next-to-be-claimed job of these lanes has
-- waited (NULL: none waiting). Claim-time aging (lanes.rs) asks it, at most every aging/4
-- per queue and process, for a priority that no claim has reached for a while: a priority
-- whose head waited longer than the queue's `aging` is served before higher ones. Read-only
-- and lock-free (a claim moving the cursor meanwhile only makes the answer slightly stale).
-- Per lane: the cursor (receipts_cursor), then the first candidate of the range it is in, or
-- of (cursor.hi, latest tick] once that is exhausted — the same candidate sets as claim(),
-- each read with LIMIT 1. The age comes from the database clock, immune to client skew.
CREATE FUNCTION pgferry.lane_head_age(p_lanes int[])
RETURNS interval
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $fn$
DECLARE
    v_latest pg_snapshot;
    v_lane   int;
    c_lo     pg_snapshot;
    c_hi     pg_snapshot;
    c_xid    xid8;
    c_seq    bigint;
    c_done   boolean;
    v_pass   int;
    v_lo     pg_snapshot;
    v_hi     pg_snapshot;
    v_xid    xid8;
    v_seq    bigint;
    v_at     timestamptz;
    v_oldest timestamptz;
BEGIN
    SELECT t.snap INTO v_latest FROM pgferry.ticks t ORDER BY t.tick_id DESC LIMIT 1;
    IF v_latest IS NULL THEN
        RETURN NULL;
    END IF;
    FOREACH v_lane IN ARRAY p_lanes LOOP
        SELECT r.lo_snap, r.hi_snap, r.last_xid, r.last_seq, r.exhausted
          INTO c_lo, c_hi, c_xid, c_seq, c_done
          FROM pgferry.receipts r WHERE r.lane = v_lane ORDER BY r.receipt_id DESC LIMIT 1;
        IF NOT FOUND THEN
            c_hi := '3:3:'; c_done := true;   -- never claimed: everything is ahead
        END IF;
        -- Pass 1: the rest of the cursor's range; pass 2: (cursor.hi, latest tick].
        FOR v_pass IN 1..2 LOOP
            CONTINUE WHEN v_pass = 1 AND c_done;
            IF v_pass = 1 THEN
                v_lo := c_lo; v_hi := c_hi; v_xid := c_xid; v_seq := c_seq;
            ELSE
                v_lo := c_hi; v_hi := v_latest; v_xid := '0'; v_seq := 0;
            END IF;
            SELECT min(h.enqueued_at) INTO v_at FROM (
                (SELECT r.enqueued_at
                   FROM unnest(ARRAY(SELECT x FROM pg_snapshot_xip(v_lo) x
                                      WHERE pg_visible_in_snapshot(x, v_hi))) AS x(xid)
                   CROSS JOIN LATERAL (
                       SELECT r.enqueued_at FROM pgferry.ready r
                        WHERE r.lane = v_lane AND r.xid = x.xid
                          AND (r.xid, r.seq) > (v_xid, v_seq)
                        ORDER BY r.seq LIMIT 1) r)
                UNION ALL
                (SELECT r.enqueued_at FROM pgferry.ready r
                  WHERE r.lane = v_lane
                    AND r.xid >= pg_snapshot_xmax(v_lo) AND r.xid < pg_snapshot_xmax(v_hi)
                    AND (r.xid, r.seq) > (v_xid, v_seq)
                    AND pg_visible_in_snapshot(r.xid, v_hi)
                  ORDER BY r.xid, r.seq LIMIT 1)
            ) h;
            EXIT WHEN v_at IS NOT NULL;
        END LOOP;
        IF v_at IS NOT NULL AND (v_oldest IS NULL OR v_at < v_oldest) THEN
            v_oldest := v_at;
        END IF;
    END LOOP;
    RETURN now() - v_oldest;
END
$fn$;
