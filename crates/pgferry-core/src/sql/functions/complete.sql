-- complete(...): records a batch of outcomes; returns, per input position, whether that
-- outcome won (first for its attempt). Arguments are aligned arrays, one element per outcome:
-- job ids, attempts, job segments, receipt ids, lanes, receipt segments, outcome codes,
-- errors, retry delays (ms), results, durations (ms).
--
-- Two statements, so that the closed-attempt check sees every outcome committed before the
-- receipt locks were granted (the same pitfall as claim's cursor, DESIGN §3.2): statement 1
-- takes the receipts' locks in key order (no deadlock between batches that share receipts,
-- nor with the rescuer, which locks the same way); statement 2, with a fresh snapshot, does
-- the rest.
-- A failed attempt finds its job row through ready_rows() (one anchor or by_id probe per
-- failed attempt). Attempts handed over to a long_leases row (ADR 0008) are split off right
-- after the receipts' locks and recorded by complete_handed().
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
    -- Free the concurrency slots of limited queues (queue_running). The
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
         WHERE w.outcome IN (2, 3, 7, 8)
    ),
    -- How a re-run is numbered: a retry (2) is the next attempt; a snooze (7) is the next
    -- attempt and does not use one up (max_attempts + 1); a hand-back of an unstarted job
    -- (8) is the same attempt again — unless its worker heartbeated it, when a long_leases
    -- row holds (job, attempt) and it is numbered as a snooze (one probe of the primary key,
    -- only for hand-backs).
    rerun AS (
        SELECT f.*,
               CASE WHEN f.outcome = 8
                    THEN EXISTS (SELECT 1 FROM pgferry.long_leases ll
                                  WHERE ll.job_id = f.job_id AND ll.attempt = f.attempt)
                    ELSE f.outcome = 7 END AS bump
          FROM failed f WHERE f.outcome IN (2, 7, 8)
    ),
    again AS (
        INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
        SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
               f.job_lane, f.job_id, f.attempt + (f.outcome = 2 OR f.bump)::int,
               f.max_attempts + f.bump::int, f.kind, f.args, f.meta
          FROM rerun f WHERE coalesce(f.delay_ms, 0) <= 0
    ),
    later AS (
        INSERT INTO pgferry.scheduled (job_id, lane, attempt, max_attempts, kind, args, meta, run_at,
                                       enqueued_at)
        SELECT f.job_id, f.job_lane, f.attempt + (f.outcome = 2 OR f.bump)::int,
               f.max_attempts + f.bump::int,
               f.kind, f.args, f.meta, now() + f.delay_ms * interval '1 millisecond',
               -- When the job was enqueued: its oldest row still in the log (a log row's
               -- enqueued_at is when that attempt entered it). Failure path only.
               (SELECT min(r0.enqueued_at) FROM pgferry.ready_rows(f.job_id) r0)
          FROM rerun f WHERE f.delay_ms > 0
    ),
    buried AS (
        INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, meta, error,
                                  enqueued_at)
        SELECT f.job_id, f.job_lane, f.attempt, f.max_attempts, f.kind, f.args, f.meta, f.error,
               (SELECT min(r0.enqueued_at) FROM pgferry.ready_rows(f.job_id) r0)
          FROM failed f WHERE f.outcome = 3
        ON CONFLICT (job_id) DO UPDATE
           SET attempt = EXCLUDED.attempt, error = EXCLUDED.error, died_at = now()
    )
    -- A hashed SubPlan (an earlier version compared each outcome with an array of all
    -- winners: quadratic).
    SELECT coalesce(v_map[o.ord], o.ord), o.ord IN (SELECT w.ord FROM win w)
      FROM o
     ORDER BY o.ord;
END
$fn$;
