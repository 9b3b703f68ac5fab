-- claim_limited(queue, limit, lanes, max, worker, lease_ms): claim_lanes() under the queue's
-- counter row lock, taking no more than the free slots, and counting what it took.
CREATE OR REPLACE FUNCTION pgferry.claim_limited(p_queue int, p_limit int, p_lanes int[], p_max int,
                                      p_worker text, p_lease_ms int)
RETURNS TABLE (receipt_id bigint, job_id bigint, attempt int, job_segment smallint,
               max_attempts int, kind text, args jsonb, meta jsonb, enqueued_at timestamptz,
               receipt_segment smallint, lane int)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_running int;
    v_n       int;
BEGIN
    INSERT INTO pgferry.queue_running (queue_id) VALUES (p_queue) ON CONFLICT DO NOTHING;
    SELECT qr.running INTO v_running FROM pgferry.queue_running qr
     WHERE qr.queue_id = p_queue FOR UPDATE;
    IF v_running >= p_limit THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM pgferry.claim_lanes(p_lanes, least(p_max, p_limit - v_running),
                                                   p_worker, p_lease_ms);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        UPDATE pgferry.queue_running SET running = running + v_n WHERE queue_id = p_queue;
    END IF;
END
$fn$;
