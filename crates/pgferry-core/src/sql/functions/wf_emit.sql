
-- Makes an instance's next step claimable at `p_at` (or later, if its rate limit says so):
-- a wf_ready row, or, when its concurrency key has no free slot, a place among the key's
-- waiters (gated at emission: the picker never sees a blocked step). Returns the status and
-- slot the caller writes in its own UPDATE of the instance (one row version per outcome).
-- A step due later takes no slot now; the claim takes one when the step is due. A
-- round_robin key's step becomes the key's representative in the picker, or waits.
CREATE OR REPLACE FUNCTION pgferry.wf_emit(p_id bigint, p_queue text, p_priority smallint, p_key text,
                                p_rate_key text, p_at timestamptz,
                                OUT status text, OUT has_slot boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := greatest(p_at, pgferry.wf_take_token(p_rate_key));
BEGIN
    has_slot := false;
    IF p_key IS NOT NULL AND v_at <= now() THEN
        IF pgferry.wf_take_slot(p_key, p_id) THEN
            has_slot := true;
        ELSE
            DELETE FROM pgferry.wf_ready WHERE instance_id = p_id;
            INSERT INTO pgferry.wf_key_waiters (key, instance_id) VALUES (p_key, p_id);
            status := 'queued';
            RETURN;
        END IF;
    END IF;
    INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
    VALUES (p_id, p_queue, p_priority, v_at)
    ON CONFLICT (instance_id) DO UPDATE SET visible_at = EXCLUDED.visible_at;
    status := 'runnable';
END $$;
