-- lane_head_age(lanes): how long the oldest next-to-be-claimed job of these lanes has
-- waited (NULL: none waiting). Claim-time aging (lanes.rs) asks it, at most every aging/4
-- per queue and process, for a priority that no claim has reached for a while: a priority
-- whose head waited longer than the queue's `aging` is served before higher ones. Read-only
-- and lock-free (a claim moving the cursor meanwhile only makes the answer slightly stale).
-- Per lane: the cursor (receipts_cursor), then the first candidate of the range it is in, or
-- of (cursor.hi, latest tick] once that is exhausted — the same candidate sets as claim(),
-- each read with LIMIT 1. The age comes from the database clock, immune to client skew.
CREATE OR REPLACE FUNCTION pgferry.lane_head_age(p_lanes int[])
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
