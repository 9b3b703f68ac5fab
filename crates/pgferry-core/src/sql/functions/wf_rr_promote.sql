
-- A round_robin key without a representative in the picker takes a free slot for its
-- oldest waiter, which becomes its representative: runnable now, so it goes to the back of
-- the picker's line, behind the other keys' steps already due. The caller holds the key's
-- row. A waiter locked by someone else (being cancelled) is skipped, never waited for.
-- Returns whether a waiter was promoted.
CREATE OR REPLACE FUNCTION pgferry.wf_rr_promote(p_key text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    w record;
BEGIN
    SELECT kw.seq, i.id, i.queue, i.priority INTO w
      FROM pgferry.wf_key_waiters kw
      JOIN pgferry.wf_instances i ON i.id = kw.instance_id
     WHERE kw.key = p_key
     ORDER BY kw.seq
     LIMIT 1
       FOR UPDATE OF kw, i SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE pgferry.wf_keys SET running = running + 1, rep = w.id
     WHERE key = p_key AND running < max AND rep IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM pgferry.wf_key_waiters WHERE key = p_key AND seq = w.seq;
    INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
    VALUES (w.id, w.queue, w.priority, now())
    ON CONFLICT (instance_id) DO UPDATE SET visible_at = EXCLUDED.visible_at;
    UPDATE pgferry.wf_instances
       SET status = 'runnable', has_slot = true, updated_at = now()
     WHERE id = w.id;
    RETURN true;
END $$;
