-- Whole receipts, however many (ADR 0006 §3). A worker that claimed over two shards (or a
-- server flush that gathered several workers' batches) reports several receipts at once;
-- pgferry.complete()'s whole-receipt path took one receipt only, and such batches went
-- through the set-based path at ~8 µs per outcome instead of ~0.5 (pg_stat_statements, bench
-- cycle --claim-batch 1000: two thirds of the completions). complete.sql now calls this
-- function, which records a batch made only of whole receipts as one completion row per
-- receipt, and hands anything else to pgferry.complete() unchanged.
--
-- "Whole" means: every outcome is a success without a result; each receipt's outcomes are
-- contiguous in the batch and equal its arrays (job ids, attempts, job segments), in claim
-- order; one job segment for the whole batch (a completion row names one segment); nothing of
-- those receipts is closed yet; no queue has a concurrency limit (queue_running would need
-- its count); no attempt has a long lease (a long lease may be handed over, ADR 0005). All
-- or nothing: one receipt that is not whole sends the batch to complete(), where the
-- first-outcome-wins checks run per outcome.
--
-- Plan: receipts_cursor (lane, receipt_id) and completions_receipt (receipt_id) probes, one
-- per receipt, pruned at run time to the receipt's partition (generic plan); no per-outcome
-- index work. The check and the insert are one statement: the insert happens only when the
-- count of whole receipts equals the count of receipts.
CREATE FUNCTION pgferry.complete_batch(
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
       AND NOT EXISTS (SELECT 1 FROM pgferry.queue_running)
       AND NOT EXISTS (SELECT 1 FROM pgferry.long_leases) THEN
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
