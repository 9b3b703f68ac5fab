
-- The terminal transition of an instance whose chain is locked: done, failed or cancelled.
-- Frees its place in the picker and its concurrency slot (promoting the next waiter),
-- cancels its children that are still active, and joins its parent.
CREATE OR REPLACE FUNCTION pgferry.wf_end(p_id bigint, p_status text, p_result jsonb, p_error text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v pgferry.wf_instances;
    c record;
BEGIN
    SELECT * INTO v FROM pgferry.wf_instances WHERE id = p_id;
    IF NOT FOUND OR NOT v.active THEN
        RETURN;
    END IF;
    UPDATE pgferry.wf_instances
       SET status = p_status, active = false, result = p_result, error = p_error,
           has_slot = false, awaits = NULL, await_deadline = NULL, wake = NULL,
           finished_at = now(), updated_at = now()
     WHERE id = p_id;
    DELETE FROM pgferry.wf_ready WHERE instance_id = p_id;
    IF v.status = 'queued' THEN
        DELETE FROM pgferry.wf_key_waiters WHERE instance_id = p_id;
    END IF;
    IF v.has_slot THEN
        PERFORM pgferry.wf_free_slot(v.concurrency_key);
    END IF;
    -- Children still running end with their parent (top-down: we hold the parent).
    FOR c IN SELECT ch.id FROM pgferry.wf_instances ch
              WHERE ch.parent_id = p_id AND ch.active
              ORDER BY ch.id
                FOR UPDATE
    LOOP
        PERFORM pgferry.wf_end(c.id, 'cancelled', NULL, 'parent ended');
    END LOOP;
    IF v.parent_id IS NOT NULL THEN
        PERFORM pgferry.wf_join(v.parent_id, v.parent_gen, p_id, p_status, p_error);
    END IF;
END $$;
