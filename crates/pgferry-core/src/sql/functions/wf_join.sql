
-- A child ended: count it at its parent (locked by the caller, top-down). The join that
-- completes the parent's wait (the last child for `all`, the first for `any`) makes the
-- parent runnable in the same statement; `any` cancels the other children. A child that did
-- not finish `done` fails the parent when the parent chose `fail_parent`.
-- A parent not waiting for this spawn (cancelled, already resumed) ignores the child.
CREATE OR REPLACE FUNCTION pgferry.wf_join(p_parent bigint, p_gen int, p_child bigint, p_status text,
                                p_error text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    p pgferry.wf_instances;
    e record;
    c record;
BEGIN
    SELECT * INTO p FROM pgferry.wf_instances WHERE id = p_parent;
    IF NOT FOUND OR p.status <> 'waiting_children' OR p.join_gen IS DISTINCT FROM p_gen THEN
        RETURN;
    END IF;
    IF p_status <> 'done' AND p.child_failure = 'fail_parent' THEN
        PERFORM pgferry.wf_end(p_parent, 'failed', NULL,
                               format('child %s %s: %s', p_child, p_status, p_error));
        RETURN;
    END IF;
    IF p.join_mode = 'any' OR p.children_pending <= 1 THEN
        e := pgferry.wf_emit(p.id, p.queue, p.priority, p.concurrency_key, p.rate_key, now());
        UPDATE pgferry.wf_instances
           SET status = e.status, has_slot = e.has_slot,
               children_pending = children_pending - 1, wake = 'children', updated_at = now()
         WHERE id = p.id;
        IF p.join_mode = 'any' THEN
            FOR c IN SELECT ch.id FROM pgferry.wf_instances ch
                      WHERE ch.parent_id = p.id AND ch.parent_gen = p_gen AND ch.active
                      ORDER BY ch.id
                        FOR UPDATE
            LOOP
                PERFORM pgferry.wf_end(c.id, 'cancelled', NULL, 'another child finished first');
            END LOOP;
        END IF;
    ELSE
        UPDATE pgferry.wf_instances
           SET children_pending = children_pending - 1, updated_at = now()
         WHERE id = p.id;
    END IF;
END $$;
