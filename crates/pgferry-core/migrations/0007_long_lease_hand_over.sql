-- Long-lease hand-over (ADR 0008, DESIGN §3.3): a job that heartbeats for hours no longer
-- keeps its segment — and with it the whole ring — from rotating.
--
-- When the oldest sealed segment is held open by attempts that have a live long lease, the
-- rotator hands them over: under their receipts' locks it copies what the attempt needs to
-- finish without its segment (the job's kind, args, meta, max_attempts, its claim) into the
-- attempt's long_leases row and marks it handed_over. From then on that row is the attempt's
-- authority: complete(), heartbeat() and the rescuer record its outcome there (first outcome
-- wins: UPDATE … WHERE outcome IS NULL), and the segment counts it as closed (handed_seg).
-- A finished handed-over row stays as the attempt's history until the janitor prunes it
-- after the retention.

ALTER TABLE pgferry.long_leases
    ADD COLUMN handed_over  boolean NOT NULL DEFAULT false,
    -- The segment that counts this attempt closed because of the hand-over; cleared in the
    -- transaction that truncates that segment (its number is then reused).
    ADD COLUMN handed_seg   smallint,
    ADD COLUMN max_attempts int,
    ADD COLUMN kind         text,
    ADD COLUMN args         jsonb,
    ADD COLUMN meta         jsonb,
    ADD COLUMN enqueued_at  timestamptz,
    ADD COLUMN claimed_at   timestamptz,
    -- Position of the attempt in its receipt's arrays (list_claimed.sql pages by it).
    ADD COLUMN receipt_pos  int,
    -- The outcome of a handed-over attempt (codes as in completions).
    ADD COLUMN outcome      smallint,
    ADD COLUMN error        text,
    ADD COLUMN result       jsonb,
    ADD COLUMN duration_ms  int,
    ADD COLUMN finished_at  timestamptz;

-- Segment numbers are reused: a worker's handle names its job's segment, and once that
-- segment was freed (every attempt in it closed, its completions truncated) an outcome
-- naming it must be stale even while its receipt, in a later segment, is still there. The
-- truncating transaction records the highest receipt id issued so far: every receipt that
-- can name an attempt of the freed incarnation is at or below it, every receipt of the next
-- incarnation above it. (Before this, such a late duplicate was accepted and counted in the
-- reused segment's completions.)
ALTER TABLE pgferry.segments ADD COLUMN reuse_floor bigint NOT NULL DEFAULT 0;

-- complete()/heartbeat(): is any attempt handed over, and which of these receipts' are.
-- Empty in a system without hour-long jobs: the hot path's gate is one probe of it.
CREATE INDEX long_leases_handed ON pgferry.long_leases (receipt_id) WHERE handed_over;
-- The rescuer's and the counters' open handed-over attempts.
CREATE INDEX long_leases_handed_open ON pgferry.long_leases (lane, lease_until)
    WHERE handed_over AND outcome IS NULL;
-- Segment closure: attempts a segment counts closed by hand-over.
CREATE INDEX long_leases_handed_seg ON pgferry.long_leases (handed_seg)
    WHERE handed_seg IS NOT NULL;

-- hand_over(segment): hands over the open attempts of a sealed segment that hold an
-- unexpired long lease; returns how many. Leader only (the rotator).
-- Statement 1 takes the receipts' locks in key order (as complete(), heartbeat() and the
-- rescuer do); statement 2, with a fresh snapshot, skips attempts closed in completions by
-- then and copies the job from its ready row, the claim from its receipt.
CREATE FUNCTION pgferry.hand_over(p_segment smallint)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET jit = off
AS $fn$
DECLARE
    v_n int;
BEGIN
    PERFORM pg_advisory_xact_lock(7267, k)
       FROM (SELECT DISTINCT (ll.receipt_id & 2147483647)::int AS k
               FROM pgferry.long_leases ll
              WHERE ll.segment = p_segment AND NOT ll.handed_over AND ll.lease_until >= now()
              ORDER BY 1) s;
    UPDATE pgferry.long_leases ll
       SET handed_over = true, handed_seg = p_segment, max_attempts = r.max_attempts,
           kind = r.kind, args = r.args, meta = r.meta, enqueued_at = r.enqueued_at,
           claimed_at = rc.claimed_at, worker = coalesce(ll.worker, rc.worker),
           receipt_pos = rc.pos
      FROM pgferry.long_leases c
      CROSS JOIN LATERAL (
          SELECT r.max_attempts, r.kind, r.args, r.meta, r.enqueued_at
            FROM pgferry.ready_rows(c.job_id) r
           WHERE r.segment = p_segment AND r.attempt = c.attempt
           LIMIT 1) r
      CROSS JOIN LATERAL (
          SELECT rc.claimed_at, rc.worker, array_position(rc.job_ids, c.job_id) AS pos
            FROM pgferry.receipts rc
           WHERE rc.segment = c.rseg AND rc.lane = c.lane AND rc.receipt_id = c.receipt_id
             AND c.job_id = ANY (rc.job_ids)
           LIMIT 1) rc
     WHERE c.segment = p_segment AND NOT c.handed_over AND c.lease_until >= now()
       AND NOT EXISTS (SELECT 1
                         FROM pgferry.completions x,
                              unnest(x.job_ids, x.attempts) AS u(job_id, attempt)
                        WHERE x.segment = p_segment AND x.receipt_id = c.receipt_id
                          AND u.job_id = c.job_id AND u.attempt = c.attempt)
       AND ll.job_id = c.job_id AND ll.attempt = c.attempt AND NOT ll.handed_over;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;

-- complete_handed(...): the outcomes of handed-over attempts (positions p_ords of the
-- batch), called by complete() under the receipts' locks. The long_leases row decides: the
-- outcome must name its attempt and receipt, and only the first outcome lands (UPDATE …
-- WHERE outcome IS NULL: a concurrent rescuer or second report waits for the row and then
-- finds it closed). Retries, delayed retries and dead letters are written as complete()
-- writes them, from the job data the hand-over carried.
CREATE FUNCTION pgferry.complete_handed(
    p_job_ids bigint[], p_attempts int[], p_receipts bigint[], p_outcomes smallint[],
    p_errors text[], p_delays bigint[], p_results jsonb[], p_durations int[], p_ords bigint[])
RETURNS TABLE (ord bigint, won boolean)
LANGUAGE sql VOLATILE AS $fn$
    WITH o AS (
        SELECT u.*
          FROM unnest(p_job_ids, p_attempts, p_receipts, p_outcomes, p_errors, p_delays,
                      p_results, p_durations)
               WITH ORDINALITY AS u(job_id, attempt, receipt_id, outcome, error, delay_ms,
                                    result, duration_ms, ord)
         WHERE u.ord = ANY (p_ords)
    ),
    first AS (
        SELECT DISTINCT ON (o.job_id, o.attempt) o.*
          FROM o ORDER BY o.job_id, o.attempt, o.ord
    ),
    win AS (
        UPDATE pgferry.long_leases ll
           SET outcome = f.outcome, error = f.error, duration_ms = f.duration_ms,
               result = CASE WHEN f.outcome = 1 THEN f.result END, finished_at = now()
          FROM first f
         WHERE ll.job_id = f.job_id AND ll.attempt = f.attempt
           AND ll.receipt_id = f.receipt_id AND ll.handed_over AND ll.outcome IS NULL
        RETURNING f.ord, f.outcome, f.delay_ms, f.error, ll.job_id, ll.attempt, ll.lane,
                  ll.max_attempts, ll.kind, ll.args, ll.meta
    ),
    again AS (
        INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
        SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
               w.lane, w.job_id, w.attempt + 1, w.max_attempts + (w.outcome = 7)::int,
               w.kind, w.args, w.meta
          FROM win w WHERE w.outcome IN (2, 7) AND coalesce(w.delay_ms, 0) <= 0
    ),
    later AS (
        INSERT INTO pgferry.scheduled (job_id, lane, attempt, max_attempts, kind, args, meta, run_at)
        SELECT w.job_id, w.lane, w.attempt + 1, w.max_attempts + (w.outcome = 7)::int,
               w.kind, w.args, w.meta, now() + w.delay_ms * interval '1 millisecond'
          FROM win w WHERE w.outcome IN (2, 7) AND w.delay_ms > 0
    ),
    buried AS (
        INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, meta, error)
        SELECT w.job_id, w.lane, w.attempt, w.max_attempts, w.kind, w.args, w.meta, w.error
          FROM win w WHERE w.outcome = 3
        ON CONFLICT (job_id) DO UPDATE
           SET attempt = EXCLUDED.attempt, error = EXCLUDED.error, died_at = now()
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
    SELECT o.ord, o.ord IN (SELECT w.ord FROM win w) FROM o
$fn$;

-- complete(): as in 0004, plus the split for handed-over attempts right after the locks.
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
    -- Positions (1-based) of outcomes for handed-over attempts, and of the rest when some are
    -- (the log paths below then see only the rest and answer with these positions).
    v_hand     bigint[];
    v_gone     bigint[];
    v_map      bigint[];
    v_handed   boolean;
    v_reused   boolean;
BEGIN
    -- The batch names a handful of receipts and segments, not 200: probe each once.
    v_receipts := ARRAY(SELECT DISTINCT r FROM unnest(p_receipts) r ORDER BY 1);
    v_segments := ARRAY(SELECT DISTINCT s FROM unnest(p_segments) s);
    PERFORM pg_advisory_xact_lock(7267, (r & 2147483647)::int) FROM unnest(v_receipts) r;

    -- Handed-over attempts (ADR 0008): their outcome belongs to their long_leases row, never
    -- to completions (their segment counts them closed already, and may be reused). After the
    -- receipts' locks (the rotator hands over under the same locks), so an attempt is either
    -- closed in completions before its hand-over or seen here as handed over. With no
    -- handed-over attempt anywhere this is one probe of an empty partial index, made in one
    -- statement with the reused-segment probe below.
    SELECT EXISTS (SELECT 1 FROM pgferry.long_leases ll WHERE ll.handed_over),
           EXISTS (SELECT 1 FROM pgferry.segments s
                    WHERE s.segment = ANY (v_segments) AND s.reuse_floor >= v_receipts[1])
      INTO v_handed, v_reused;
    IF v_handed THEN
        v_hand := ARRAY(
            SELECT o.ord
              FROM unnest(p_job_ids, p_attempts, p_receipts) WITH ORDINALITY AS o(job_id, attempt, receipt_id, ord)
             WHERE (o.job_id, o.attempt, o.receipt_id) IN (
                       SELECT ll.job_id, ll.attempt, ll.receipt_id
                         FROM pgferry.long_leases ll
                        WHERE ll.handed_over AND ll.receipt_id = ANY (v_receipts)));
    END IF;
    -- Outcomes naming a freed incarnation of their segment are stale (reuse_floor above).
    IF v_reused THEN
        v_gone := ARRAY(
            SELECT o.ord
              FROM unnest(p_segments, p_receipts) WITH ORDINALITY AS o(segment, receipt_id, ord)
              JOIN pgferry.segments s ON s.segment = o.segment
             WHERE o.receipt_id <= s.reuse_floor AND o.ord <> ALL (coalesce(v_hand, '{}')));
    END IF;
    IF cardinality(v_hand) > 0 OR cardinality(v_gone) > 0 THEN
        IF cardinality(v_hand) > 0 THEN
            RETURN QUERY SELECT h.ord, h.won
                           FROM pgferry.complete_handed(p_job_ids, p_attempts, p_receipts,
                                                        p_outcomes, p_errors, p_delays,
                                                        p_results, p_durations, v_hand) h;
        END IF;
        RETURN QUERY SELECT g, false FROM unnest(v_gone) g;
        v_map := ARRAY(SELECT g::bigint FROM generate_series(1, cardinality(p_job_ids)) g
                        WHERE g <> ALL (coalesce(v_hand, '{}') || coalesce(v_gone, '{}'))
                        ORDER BY g);
        IF cardinality(v_map) = 0 THEN
            RETURN;
        END IF;
        p_job_ids := ARRAY(SELECT p_job_ids[i] FROM unnest(v_map) i);
        p_attempts := ARRAY(SELECT p_attempts[i] FROM unnest(v_map) i);
        p_segments := ARRAY(SELECT p_segments[i] FROM unnest(v_map) i);
        p_receipts := ARRAY(SELECT p_receipts[i] FROM unnest(v_map) i);
        p_lanes := ARRAY(SELECT p_lanes[i] FROM unnest(v_map) i);
        p_rsegs := ARRAY(SELECT p_rsegs[i] FROM unnest(v_map) i);
        p_outcomes := ARRAY(SELECT p_outcomes[i] FROM unnest(v_map) i);
        p_errors := CASE WHEN p_errors IS NOT NULL
                         THEN ARRAY(SELECT p_errors[i] FROM unnest(v_map) i) END;
        p_delays := CASE WHEN p_delays IS NOT NULL
                         THEN ARRAY(SELECT p_delays[i] FROM unnest(v_map) i) END;
        p_results := CASE WHEN p_results IS NOT NULL
                          THEN ARRAY(SELECT p_results[i] FROM unnest(v_map) i) END;
        p_durations := CASE WHEN p_durations IS NOT NULL
                            THEN ARRAY(SELECT p_durations[i] FROM unnest(v_map) i) END;
    END IF;

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
            RETURN QUERY SELECT coalesce(v_map[g], g::bigint), true
                           FROM generate_series(1, cardinality(p_job_ids)) g;
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
        SELECT coalesce(v_map[o.ord], o.ord), o.ord IN (SELECT w.ord FROM win w)
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
    SELECT coalesce(v_map[o.ord], o.ord), o.ord IN (SELECT w.ord FROM win w)
      FROM o
     ORDER BY o.ord;
END
$fn$;

-- heartbeat(): as in 0003, and for handed-over attempts the long_leases row is the authority
-- (their receipt may be gone): held while it names the attempt and receipt and has no
-- outcome. The log path never answers for a handed-over attempt (it would extend a finished
-- one whose receipt is still there).
CREATE OR REPLACE FUNCTION pgferry.heartbeat(
    p_job_ids bigint[], p_attempts int[], p_segments smallint[], p_receipts bigint[],
    p_lanes int[], p_rsegs smallint[], p_lease_ms int, p_worker text)
RETURNS TABLE (ord bigint, held boolean, cancelled boolean, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_handed boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(7267, k)
       FROM (SELECT DISTINCT (r & 2147483647)::int AS k FROM unnest(p_receipts) r ORDER BY 1) s;
    v_handed := EXISTS (SELECT 1 FROM pgferry.long_leases ll WHERE ll.handed_over);

    RETURN QUERY
    WITH o AS (
        SELECT *
          FROM unnest(p_job_ids, p_attempts, p_segments, p_receipts, p_lanes, p_rsegs)
               WITH ORDINALITY AS o(job_id, attempt, segment, receipt_id, lane, rseg, ord)
    ),
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
    closed AS (
        SELECT c.receipt_id, u.job_id, u.attempt
          FROM pgferry.completions c, unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
         WHERE c.receipt_id = ANY (p_receipts) AND c.segment = ANY (p_segments)
    ),
    -- Handed-over attempts of these receipts (index long_leases_handed; only when any exist).
    hand AS (
        SELECT ll.receipt_id, ll.job_id, ll.attempt, ll.outcome IS NULL AS open
          FROM pgferry.long_leases ll
         WHERE v_handed AND ll.handed_over AND ll.receipt_id = ANY (p_receipts)
    ),
    live AS (
        SELECT o.*
          FROM o
         WHERE ((o.receipt_id, o.job_id, o.attempt, o.segment)
                   IN (SELECT h.receipt_id, h.job_id, h.attempt, h.segment FROM held h)
                AND (o.receipt_id, o.job_id, o.attempt)
                   NOT IN (SELECT c.receipt_id, c.job_id, c.attempt FROM closed c)
                AND (o.receipt_id, o.job_id, o.attempt)
                   NOT IN (SELECT h.receipt_id, h.job_id, h.attempt FROM hand h)
                -- Not an attempt of a freed incarnation of its segment (reuse_floor).
                AND o.receipt_id > (SELECT s.reuse_floor FROM pgferry.segments s
                                     WHERE s.segment = o.segment))
            OR (o.receipt_id, o.job_id, o.attempt)
                   IN (SELECT h.receipt_id, h.job_id, h.attempt FROM hand h WHERE h.open)
    ),
    up AS (
        INSERT INTO pgferry.long_leases (receipt_id, job_id, attempt, lane, rseg, segment,
                                         worker, lease_until)
        SELECT DISTINCT ON (l.job_id, l.attempt) l.receipt_id, l.job_id, l.attempt, l.lane,
               l.rseg, l.segment, p_worker, now() + p_lease_ms * interval '1 millisecond'
          FROM live l
        ON CONFLICT (job_id, attempt) DO UPDATE SET lease_until = EXCLUDED.lease_until,
                                                    worker = EXCLUDED.worker
         WHERE long_leases.outcome IS NULL
        RETURNING job_id, attempt
    )
    SELECT o.ord,
           (o.job_id, o.attempt) IN (SELECT up.job_id, up.attempt FROM up),
           EXISTS (SELECT 1 FROM pgferry.cancels c WHERE c.job_id = o.job_id),
           now() + p_lease_ms * interval '1 millisecond'
      FROM o
     ORDER BY o.ord;
END
$fn$;

-- complete_batch() (0006): the whole-receipts path no longer steps aside whenever any long
-- lease exists — with jobs that run for hours there always is one. It checks, after the
-- receipts' locks (the hand-over takes the same locks), that no attempt of each receipt was
-- handed over, and that the job segment was not freed since the receipt was made
-- (reuse_floor); a receipt failing either sends the batch to complete(), which handles both.
CREATE OR REPLACE FUNCTION pgferry.complete_batch(
    p_job_ids bigint[], p_attempts int[], p_segments smallint[], p_receipts bigint[],
    p_lanes int[], p_rsegs smallint[], p_outcomes smallint[], p_errors text[],
    p_delays bigint[], p_results jsonb[], p_durations int[])
RETURNS TABLE (ord bigint, won boolean)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $fn$
DECLARE
    v_receipts bigint[];
    v_whole    bigint;
BEGIN
    IF 1 = ALL (p_outcomes) AND p_results IS NULL
       AND p_segments[1] = ALL (p_segments)
       AND NOT EXISTS (SELECT 1 FROM pgferry.queue_running) THEN
        v_receipts := ARRAY(SELECT DISTINCT r FROM unnest(p_receipts) r ORDER BY 1);
        -- The key order of complete(), heartbeat and the rescuer; the snapshot of the next
        -- statement is taken after the locks, so it sees any completion committed before.
        PERFORM pg_advisory_xact_lock(7267, (r & 2147483647)::int) FROM unnest(v_receipts) r;

        WITH k AS MATERIALIZED (
            -- One row per (receipt, lane, receipt segment) and where its outcomes sit.
            SELECT u.receipt_id, u.lane, u.rseg, min(u.i)::int AS lo, max(u.i)::int AS hi,
                   count(*) AS n
              FROM unnest(p_receipts, p_lanes, p_rsegs) WITH ORDINALITY
                   AS u(receipt_id, lane, rseg, i)
             GROUP BY u.receipt_id, u.lane, u.rseg
        ),
        whole AS MATERIALIZED (
            SELECT k.receipt_id, k.lo, k.hi
              FROM k
              CROSS JOIN LATERAL (
                  SELECT rc.job_ids, rc.attempts, rc.job_segments
                    FROM pgferry.receipts rc
                   WHERE rc.segment = k.rseg AND rc.lane = k.lane
                     AND rc.receipt_id = k.receipt_id
                   LIMIT 1) rc
             WHERE k.n = k.hi - k.lo + 1
               AND rc.job_ids = p_job_ids[k.lo:k.hi]
               AND rc.attempts = p_attempts[k.lo:k.hi]
               AND rc.job_segments = p_segments[k.lo:k.hi]
               AND NOT EXISTS (SELECT 1 FROM pgferry.completions c
                                WHERE c.receipt_id = k.receipt_id
                                  AND c.segment = p_segments[1])
               -- After the locks: no attempt of the receipt handed over (the rotator hands
               -- over under the same locks; index long_leases_handed, empty unless some job
               -- runs for hours) ...
               AND NOT EXISTS (SELECT 1 FROM pgferry.long_leases ll
                                WHERE ll.handed_over AND ll.receipt_id = k.receipt_id)
               -- ... and the job segment is the incarnation the receipt named.
               AND k.receipt_id > (SELECT s.reuse_floor FROM pgferry.segments s
                                    WHERE s.segment = p_segments[1])
        )
        INSERT INTO pgferry.completions (segment, receipt_id, outcome, job_ids, attempts,
                                         durations)
        SELECT p_segments[1], w.receipt_id, 1, p_job_ids[w.lo:w.hi], p_attempts[w.lo:w.hi],
               p_durations[w.lo:w.hi]
          FROM whole w
         WHERE (SELECT count(*) FROM whole) = cardinality(v_receipts)
           AND (SELECT count(*) FROM k) = cardinality(v_receipts);
        GET DIAGNOSTICS v_whole = ROW_COUNT;
        IF v_whole > 0 THEN
            RETURN QUERY SELECT g::bigint, true FROM generate_series(1, cardinality(p_job_ids)) g;
            RETURN;
        END IF;
    END IF;

    RETURN QUERY
    SELECT c.ord, c.won
      FROM pgferry.complete(p_job_ids, p_attempts, p_segments, p_receipts, p_lanes, p_rsegs,
                            p_outcomes, p_errors, p_delays, p_results, p_durations) c;
END
$fn$;
