-- complete_handed(...): the outcomes of handed-over attempts (positions p_ords of the
-- batch), called by complete() under the receipts' locks. The long_leases row decides: the
-- outcome must name its attempt and receipt, and only the first outcome lands (UPDATE …
-- WHERE outcome IS NULL: a concurrent rescuer or second report waits for the row and then
-- finds it closed). Retries, delayed retries and dead letters are written as complete()
-- writes them, from the job data the hand-over carried.
CREATE OR REPLACE FUNCTION pgferry.complete_handed(
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
                  ll.max_attempts, ll.kind, ll.args, ll.meta, ll.enqueued_at
    ),
    again AS (
        INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
        SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
               w.lane, w.job_id, w.attempt + 1, w.max_attempts + (w.outcome IN (7, 8))::int,
               w.kind, w.args, w.meta
          FROM win w WHERE w.outcome IN (2, 7, 8) AND coalesce(w.delay_ms, 0) <= 0
    ),
    later AS (
        INSERT INTO pgferry.scheduled (job_id, lane, attempt, max_attempts, kind, args, meta, run_at,
                                       enqueued_at)
        SELECT w.job_id, w.lane, w.attempt + 1, w.max_attempts + (w.outcome IN (7, 8))::int,
               w.kind, w.args, w.meta, now() + w.delay_ms * interval '1 millisecond',
               coalesce((SELECT min(r0.enqueued_at) FROM pgferry.ready_rows(w.job_id) r0), w.enqueued_at)
          FROM win w WHERE w.outcome IN (2, 7, 8) AND w.delay_ms > 0
    ),
    buried AS (
        INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, meta, error,
                                  enqueued_at)
        SELECT w.job_id, w.lane, w.attempt, w.max_attempts, w.kind, w.args, w.meta, w.error,
               coalesce((SELECT min(r0.enqueued_at) FROM pgferry.ready_rows(w.job_id) r0), w.enqueued_at)
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
