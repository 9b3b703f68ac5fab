-- pgferry engine schema: the append-only log (DESIGN.md §3.1–3.4).
--
-- Hot tables (ready, receipts, completions, results, ticks) are LIST-partitioned by
-- `segment` into a ring of 16. Rows are only ever INSERTed; space comes back by TRUNCATE of
-- a whole segment once every job in it is closed (see rotate.rs). Mutable tables
-- (segments, queues, lanes, scheduled, dead, leader_state) are small or low-churn.

CREATE SCHEMA IF NOT EXISTS pgferry;

-- Queues and lanes ---------------------------------------------------------------------
-- A lane is (queue, priority, shard): the routing key every hot statement filters with `=`.
CREATE TABLE pgferry.queues (
    queue_id     int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    shards       smallint NOT NULL DEFAULT 1 CHECK (shards BETWEEN 1 AND 64),
    max_attempts int NOT NULL DEFAULT 25 CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_ms     int NOT NULL DEFAULT 60000 CHECK (lease_ms BETWEEN 100 AND 86400000),
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgferry.lanes (
    lane     int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id int NOT NULL REFERENCES pgferry.queues,
    priority smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 3),
    shard    smallint NOT NULL DEFAULT 0,
    UNIQUE (queue_id, priority, shard)
);

-- Segments -------------------------------------------------------------------------------
-- free -> current -> sealed -> freeing -> free. Exactly one is current; inserts read it once
-- per statement (an InitPlan), so a batch never straddles two segments. 'freeing': its
-- partitions are being detached, truncated and re-attached (rotator.rs); a crash in the
-- middle is repaired by the next rotation.
CREATE TABLE pgferry.segments (
    segment   smallint PRIMARY KEY,
    state     text NOT NULL CHECK (state IN ('free', 'current', 'sealed', 'freeing')),
    opened_at timestamptz,
    sealed_at timestamptz,
    -- Deferred: advancing swaps 'current' between two rows in one UPDATE.
    CONSTRAINT segments_one_current EXCLUDE ((state) WITH =) WHERE (state = 'current')
        DEFERRABLE INITIALLY DEFERRED
);
INSERT INTO pgferry.segments (segment, state, opened_at)
SELECT s, CASE WHEN s = 0 THEN 'current' ELSE 'free' END, CASE WHEN s = 0 THEN now() END
FROM generate_series(0, 15) AS s;

CREATE SEQUENCE pgferry.job_id_seq;
-- Order of rows inside one transaction; cursors order by (xid, seq). CACHE 1 on purpose:
-- the ticker reads last_value to notice that the log grew.
CREATE SEQUENCE pgferry.ready_seq;
CREATE SEQUENCE pgferry.receipt_seq;
CREATE SEQUENCE pgferry.tick_seq;

-- The ready log: one row per runnable job attempt.
CREATE TABLE pgferry.ready (
    segment      smallint NOT NULL,
    lane         int NOT NULL,
    xid          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq          bigint NOT NULL DEFAULT nextval('pgferry.ready_seq'),
    job_id       bigint NOT NULL,
    attempt      int NOT NULL,
    max_attempts int NOT NULL,
    kind         text NOT NULL,
    args         jsonb NOT NULL,
    meta         jsonb,
    enqueued_at  timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (segment);
-- Claim reads (lane = $1, (xid, seq) > cursor) in index order and stops at LIMIT.
CREATE INDEX ready_claim ON pgferry.ready (lane, xid, seq);
-- Completion and lookups find an attempt by job id inside its segment.
CREATE INDEX ready_job ON pgferry.ready (job_id);

-- One row per claim batch. The newest receipt of a lane IS the lane's cursor; snapshots are
-- copied in (not referenced by tick id) so that ticks can be truncated with their segment.
CREATE TABLE pgferry.receipts (
    segment      smallint NOT NULL,
    receipt_id   bigint NOT NULL DEFAULT nextval('pgferry.receipt_seq'),
    lane         int NOT NULL,
    lo_snap      pg_snapshot NOT NULL,
    hi_snap      pg_snapshot NOT NULL,
    hi_tick      bigint NOT NULL,
    last_xid     xid8 NOT NULL,
    last_seq     bigint NOT NULL,
    exhausted    boolean NOT NULL,
    job_ids      bigint[] NOT NULL,
    attempts     int[] NOT NULL,
    job_segments smallint[] NOT NULL,
    worker       text,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    lease_until  timestamptz NOT NULL
) PARTITION BY LIST (segment);
CREATE INDEX receipts_cursor ON pgferry.receipts (lane, receipt_id DESC);
-- The rescuer scans receipt ids after its mark. BRIN, not B-tree: ids only grow, so BRIN is
-- exact enough and nearly free to maintain, and — unlike a B-tree on receipt_id — it cannot
-- supply ORDER BY receipt_id, so the planner can never answer a lane's cursor probe by
-- walking every lane's receipts backwards (seen with a B-tree when one lane dominated).
CREATE INDEX receipts_id ON pgferry.receipts USING brin (receipt_id) WITH (pages_per_range = 4);

-- Outcomes, one row per (receipt, job segment, outcome) of each complete() call: the
-- attempts it closes are the aligned arrays job_ids/attempts (errors and durations only when
-- some outcome has one). A batch of 200 successes is one row and one index entry, not 200
-- (ADR 0003: per-job rows were 40% of the hot path's time and WAL). Rows live in the segment
-- of the attempts' ready rows, so a segment is closed when the attempts counted here equal
-- its ready rows.
--
-- First outcome wins without a unique index: every attempt belongs to exactly one receipt,
-- and every writer of outcomes (complete(), the rescuer) first takes the receipt's advisory
-- lock (7267, receipt_id) and then, in a later statement with a fresh snapshot, skips the
-- attempts already closed under that receipt.
CREATE TABLE pgferry.completions (
    segment     smallint NOT NULL,
    receipt_id  bigint NOT NULL,
    outcome     smallint NOT NULL,
    job_ids     bigint[] NOT NULL,
    attempts    int[] NOT NULL,
    errors      text[],
    durations   int[],
    finished_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (segment);
-- Closed attempts of a receipt (complete(), rescue, lookups): one probe per receipt.
CREATE INDEX completions_receipt ON pgferry.completions (receipt_id);

-- Return values, only for jobs that produce one.
CREATE TABLE pgferry.results (
    segment smallint NOT NULL,
    job_id  bigint NOT NULL,
    attempt int NOT NULL,
    result  jsonb NOT NULL
) PARTITION BY LIST (segment);
CREATE INDEX results_job ON pgferry.results (job_id);

-- Visibility ticks written by the leader: the rows that became visible between two ticks
-- form a closed, immutable set (PgQ's batches).
CREATE TABLE pgferry.ticks (
    segment  smallint NOT NULL,
    tick_id  bigint NOT NULL,
    snap     pg_snapshot NOT NULL,
    seq_hi   bigint NOT NULL,
    -- The tick's own transaction: the next tick ignores it when looking for activity.
    own_xid  xid8 NOT NULL DEFAULT pg_current_xact_id(),
    taken_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (segment);
CREATE INDEX ticks_id ON pgferry.ticks (tick_id DESC);

DO $$
DECLARE
    s int;
    t text;
BEGIN
    FOR s IN 0..15 LOOP
        FOREACH t IN ARRAY ARRAY['ready', 'receipts', 'completions', 'results', 'ticks'] LOOP
            EXECUTE format('CREATE TABLE pgferry.%I PARTITION OF pgferry.%I FOR VALUES IN (%s)',
                           t || '_' || lpad(s::text, 2, '0'), t, s);
        END LOOP;
    END LOOP;
END $$;

-- Mutable, low-churn side tables --------------------------------------------------------
-- Jobs whose run time is in the future (delayed retries, scheduled jobs).
CREATE TABLE pgferry.scheduled (
    job_id       bigint PRIMARY KEY,
    lane         int NOT NULL,
    attempt      int NOT NULL,
    max_attempts int NOT NULL,
    kind         text NOT NULL,
    args         jsonb NOT NULL,
    meta         jsonb,
    run_at       timestamptz NOT NULL
);
CREATE INDEX scheduled_due ON pgferry.scheduled (run_at);

-- The dead-letter queue.
CREATE TABLE pgferry.dead (
    job_id       bigint PRIMARY KEY,
    lane         int NOT NULL,
    attempt      int NOT NULL,
    max_attempts int NOT NULL,
    kind         text NOT NULL,
    args         jsonb NOT NULL,
    meta         jsonb,
    error        text,
    died_at      timestamptz NOT NULL DEFAULT now()
);

-- Leader bookkeeping (one row).
CREATE TABLE pgferry.leader_state (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    rescue_mark bigint NOT NULL DEFAULT 0
);
INSERT INTO pgferry.leader_state DEFAULT VALUES;

-- claim(lane, max, worker, lease_ms) ---------------------------------------------------------
-- One call claims up to p_max jobs of one lane and appends one receipt. VOLATILE on purpose:
-- every statement below takes a fresh snapshot, so the cursor is read AFTER the lane lock is
-- granted and can never miss the previous claimer's receipt.
CREATE FUNCTION pgferry.claim(p_lane int, p_max int, p_worker text, p_lease_ms int)
RETURNS TABLE (receipt_id bigint, job_id bigint, attempt int, job_segment smallint,
               max_attempts int, kind text, args jsonb, meta jsonb, enqueued_at timestamptz,
               receipt_segment smallint)
LANGUAGE plpgsql VOLATILE
-- Every statement here has an index made for it. Statistics of a segment partition are
-- stale right after it is reused (truncated, then grown before autoanalyze): never let that
-- turn a cursor probe into a scan of a whole partition.
SET enable_seqscan = off
AS $fn$
DECLARE
    v_lo        pg_snapshot;
    v_hi        pg_snapshot;
    v_hi_tick   bigint := 0;
    v_last_xid  xid8 := '0';
    v_last_seq  bigint := 0;
    v_exhausted boolean := true;
    v_tick      record;
    v_row       record;
    v_need      int := p_max;
    v_got       int;
    v_ids       bigint[] := '{}';
    v_atts      int[] := '{}';
    v_segs      smallint[] := '{}';
    v_receipt   bigint;
    v_rseg      smallint;
    v_pass      int;
    v_xip       xid8[];
    v_sort      text := current_setting('enable_sort');
    -- Cancelled jobs met by this claim: closed with outcome 4 under its receipt.
    v_any_cancel boolean;
    v_cids      bigint[] := '{}';
    v_catts     int[] := '{}';
    v_csegs     smallint[] := '{}';
BEGIN
    -- One claimer per lane at a time; the others move on to other lanes instead of waiting.
    IF NOT pg_try_advisory_xact_lock(7266, p_lane) THEN
        RETURN;
    END IF;

    -- The cursor: index receipts_cursor (lane, receipt_id DESC), one probe per partition.
    SELECT r.lo_snap, r.hi_snap, r.hi_tick, r.last_xid, r.last_seq, r.exhausted
      INTO v_lo, v_hi, v_hi_tick, v_last_xid, v_last_seq, v_exhausted
      FROM pgferry.receipts r
     WHERE r.lane = p_lane
     ORDER BY r.receipt_id DESC
     LIMIT 1;
    IF NOT FOUND THEN
        -- A lane never claimed starts below every real xid (3 = FirstNormalTransactionId).
        v_hi := '3:3:'; v_hi_tick := 0; v_exhausted := true;
    END IF;

    -- At most two ranges per call: finish the current one, then start the next.
    FOR v_pass IN 1..2 LOOP
        IF v_exhausted THEN
            SELECT t.tick_id, t.snap INTO v_tick
              FROM pgferry.ticks t ORDER BY t.tick_id DESC LIMIT 1;
            EXIT WHEN NOT FOUND OR v_tick.tick_id <= v_hi_tick;
            v_lo := v_hi; v_hi := v_tick.snap; v_hi_tick := v_tick.tick_id;
            v_last_xid := '0'; v_last_seq := 0; v_exhausted := false;
        END IF;

        v_got := 0;
        -- One probe per claim; per-row probes only while some cancellation is pending.
        v_any_cancel := coalesce(v_any_cancel, EXISTS (SELECT 1 FROM pgferry.cancels));
        -- Candidates of range (lo, hi]: xids in progress at lo, plus [lo.xmax, hi.xmax).
        -- Never `xid >= lo.xmin`: an old open transaction would make every claim rescan
        -- everything since it began. Every xip(lo) xid is below lo.xmax, so step A's rows
        -- all come before step B's in (xid, seq) order.
        --
        -- Step A, the xip region: Index Cond (lane = $1 AND xid = ANY(xip)), reading only the
        -- rows of transactions in progress at lo. The lookup sits behind an OFFSET 0 fence
        -- with the ORDER BY outside: otherwise a cached generic plan prefers reading the whole
        -- lane in index order (to skip a small sort) and filtering xid = ANY row by row
        -- (measured: 6758 rows read for 12 returned).
        v_xip := ARRAY(SELECT pg_snapshot_xip(v_lo));
        IF v_last_xid < pg_snapshot_xmax(v_lo) AND cardinality(v_xip) > 0 THEN
            FOR v_row IN
                SELECT a.*
                  FROM (SELECT r.job_id, r.attempt, r.segment, r.max_attempts, r.kind, r.args,
                               r.meta, r.enqueued_at, r.xid, r.seq
                          FROM pgferry.ready r
                         WHERE r.lane = p_lane
                           AND r.xid = ANY (v_xip)
                           AND pg_visible_in_snapshot(r.xid, v_hi)
                        OFFSET 0) a
                 WHERE a.xid > v_last_xid OR (a.xid = v_last_xid AND a.seq > v_last_seq)
                 ORDER BY a.xid, a.seq
                 LIMIT v_need
            LOOP
                v_got := v_got + 1;
                IF v_receipt IS NULL THEN
                    v_receipt := nextval('pgferry.receipt_seq');
                    -- The receipt's segment travels with each job so that outcomes find
                    -- the receipt with one index probe in one partition.
                    SELECT s.segment INTO v_rseg FROM pgferry.segments s WHERE s.state = 'current';
                END IF;
                v_last_xid := v_row.xid; v_last_seq := v_row.seq;
                v_ids := v_ids || v_row.job_id; v_atts := v_atts || v_row.attempt;
                v_segs := v_segs || v_row.segment;
                IF v_any_cancel AND EXISTS (SELECT 1 FROM pgferry.cancels c
                                             WHERE c.job_id = v_row.job_id) THEN
                    v_cids := v_cids || v_row.job_id; v_catts := v_catts || v_row.attempt;
                    v_csegs := v_csegs || v_row.segment;
                    CONTINUE;
                END IF;
                receipt_id := v_receipt; job_id := v_row.job_id; attempt := v_row.attempt;
                job_segment := v_row.segment; max_attempts := v_row.max_attempts;
                kind := v_row.kind; args := v_row.args; meta := v_row.meta;
                enqueued_at := v_row.enqueued_at; receipt_segment := v_rseg;
                RETURN NEXT;
            END LOOP;
        END IF;
        -- Step B, the range [lo.xmax, hi.xmax): Index Cond (lane = $1 AND (xid, seq) >
        -- cursor AND xid >= lo.xmax AND xid < hi.xmax), rows already in claim order per
        -- partition, Merge Append, Limit. Sorting is disabled for this one statement (plans
        -- are made when it first runs, so cached plans keep it): with small or stale
        -- statistics the planner would otherwise sort the whole range to take LIMIT rows.
        IF v_got < v_need THEN
            PERFORM set_config('enable_sort', 'off', true);
            FOR v_row IN
                SELECT r.job_id, r.attempt, r.segment, r.max_attempts, r.kind, r.args,
                       r.meta, r.enqueued_at, r.xid, r.seq
                  FROM pgferry.ready r
                 WHERE r.lane = p_lane
                   AND r.xid >= pg_snapshot_xmax(v_lo)
                   AND r.xid < pg_snapshot_xmax(v_hi)
                   AND (r.xid, r.seq) > (v_last_xid, v_last_seq)
                   AND pg_visible_in_snapshot(r.xid, v_hi)
                 ORDER BY r.xid, r.seq
                 LIMIT v_need - v_got
            LOOP
                v_got := v_got + 1;
                IF v_receipt IS NULL THEN
                    v_receipt := nextval('pgferry.receipt_seq');
                    -- The receipt's segment travels with each job so that outcomes find
                    -- the receipt with one index probe in one partition.
                    SELECT s.segment INTO v_rseg FROM pgferry.segments s WHERE s.state = 'current';
                END IF;
                v_last_xid := v_row.xid; v_last_seq := v_row.seq;
                v_ids := v_ids || v_row.job_id; v_atts := v_atts || v_row.attempt;
                v_segs := v_segs || v_row.segment;
                IF v_any_cancel AND EXISTS (SELECT 1 FROM pgferry.cancels c
                                             WHERE c.job_id = v_row.job_id) THEN
                    v_cids := v_cids || v_row.job_id; v_catts := v_catts || v_row.attempt;
                    v_csegs := v_csegs || v_row.segment;
                    CONTINUE;
                END IF;
                receipt_id := v_receipt; job_id := v_row.job_id; attempt := v_row.attempt;
                job_segment := v_row.segment; max_attempts := v_row.max_attempts;
                kind := v_row.kind; args := v_row.args; meta := v_row.meta;
                enqueued_at := v_row.enqueued_at; receipt_segment := v_rseg;
                RETURN NEXT;
            END LOOP;
            PERFORM set_config('enable_sort', v_sort, true);
        END IF;
        v_need := v_need - v_got;
        IF v_need > 0 THEN
            v_exhausted := true;
        END IF;
        EXIT WHEN v_need = 0;
    END LOOP;

    -- An idle claim writes nothing: the cursor only has to move when jobs were taken.
    IF v_receipt IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO pgferry.receipts (receipt_id, segment, lane, lo_snap, hi_snap, hi_tick, last_xid,
                                  last_seq, exhausted, job_ids, attempts, job_segments,
                                        worker, lease_until)
    VALUES (v_receipt, v_rseg, p_lane,
            v_lo, v_hi, v_hi_tick, v_last_xid, v_last_seq, v_exhausted, v_ids, v_atts,
            v_segs, p_worker, now() + p_lease_ms * interval '1 millisecond');
    -- Nobody else knows this receipt yet: its cancelled attempts close without a lock.
    IF cardinality(v_cids) > 0 THEN
        INSERT INTO pgferry.completions (segment, receipt_id, outcome, job_ids, attempts, errors)
        SELECT u.seg, v_receipt, 4, array_agg(u.id), array_agg(u.att), array_agg('cancelled'::text)
          FROM unnest(v_cids, v_catts, v_csegs) AS u(id, att, seg)
         GROUP BY u.seg;
    END IF;
END
$fn$;

-- claim_lanes(lanes, max, worker, lease_ms) ------------------------------------------------
-- Claims from several lanes in the order given (priority order, shards rotated by the
-- caller) until p_max jobs are taken: one statement for a whole queue. Each row says which
-- lane it came from, so the caller can tell which lanes ran dry.
CREATE FUNCTION pgferry.claim_lanes(p_lanes int[], p_max int, p_worker text, p_lease_ms int)
RETURNS TABLE (receipt_id bigint, job_id bigint, attempt int, job_segment smallint,
               max_attempts int, kind text, args jsonb, meta jsonb, enqueued_at timestamptz,
               receipt_segment smallint, lane int)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_lane int;
    v_got  int := 0;
    v_n    int;
BEGIN
    FOREACH v_lane IN ARRAY p_lanes LOOP
        EXIT WHEN v_got >= p_max;
        RETURN QUERY SELECT c.*, v_lane
                       FROM pgferry.claim(v_lane, p_max - v_got, p_worker, p_lease_ms) c;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_got := v_got + v_n;
    END LOOP;
END
$fn$;

-- complete(...) ------------------------------------------------------------------------------
-- Records a batch of outcomes; returns, per input position, whether that outcome won (first
-- for its attempt). Arguments are aligned arrays, one element per outcome:
-- job ids, attempts, job segments, receipt ids, lanes, receipt segments, outcome codes,
-- errors, retry delays (ms), results, durations (ms).
--
-- Two statements, so that the closed-attempt check sees every outcome committed before the
-- receipt locks were granted (the same pitfall as claim's cursor, DESIGN §3.2): statement 1
-- takes the receipts' locks in key order (no deadlock between batches that share receipts,
-- nor with the rescuer, which locks the same way); statement 2, with a fresh snapshot, does
-- the rest.
CREATE FUNCTION pgferry.complete(
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
AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(7267, k)
       FROM (SELECT DISTINCT (r & 2147483647)::int AS k FROM unnest(p_receipts) r ORDER BY 1) s;

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
         WHERE c.receipt_id = ANY (p_receipts) AND c.segment = ANY (p_segments)
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
    -- Failures need the job itself: a per-attempt probe of ready_job in its partition, only
    -- for retries and dead letters (LATERAL ... LIMIT 1 stays a probe under any estimate).
    failed AS (
        SELECT w.*, r.lane AS job_lane, r.max_attempts, r.kind, r.args, r.meta
          FROM win w
          CROSS JOIN LATERAL (
              SELECT r.lane, r.max_attempts, r.kind, r.args, r.meta
                FROM pgferry.ready r
               WHERE r.segment = w.segment AND r.job_id = w.job_id AND r.attempt = w.attempt
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
    ),
    winners AS (
        SELECT coalesce(array_agg(w.ord), '{}') AS ords FROM win w
    )
    SELECT o.ord, o.ord = ANY (winners.ords)
      FROM o, winners
     ORDER BY o.ord;
END
$fn$;
