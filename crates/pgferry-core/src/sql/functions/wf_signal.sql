
-- Sends a signal to an instance, by id or by (queue, correlation key); also callable inside
-- the caller's own transaction. An instance awaiting this name consumes it at once and
-- becomes runnable in the same statement; otherwise it waits in the inbox for an await that
-- names it (consumed then, exactly once). A delivery NOTIFYs pgferry_wf_ready (the queue).
-- Errors: P0002 no such active instance, 55000 the instance already ended.
CREATE OR REPLACE FUNCTION pgferry.wf_signal(p_id bigint, p_queue text, p_correlation_key text,
                                  p_name text, p_payload jsonb,
                                  OUT signal_id bigint, OUT instance_id bigint,
                                  OUT delivered boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v pgferry.wf_instances;
    e record;
BEGIN
    instance_id := p_id;
    IF instance_id IS NULL THEN
        SELECT i.id INTO instance_id FROM pgferry.wf_instances i
         WHERE i.queue = p_queue AND i.correlation_key = p_correlation_key AND i.active;
    END IF;
    SELECT * INTO v FROM pgferry.wf_instances i WHERE i.id = wf_signal.instance_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow instance % not found',
              coalesce(p_id::text, p_queue || '/' || p_correlation_key)
              USING ERRCODE = 'P0002';
    END IF;
    IF NOT v.active THEN
        RAISE EXCEPTION 'workflow instance % is %', v.id, v.status USING ERRCODE = '55000';
    END IF;
    delivered := v.status = 'awaiting' AND p_name = ANY (v.awaits);
    INSERT INTO pgferry.wf_signals AS s (instance_id, name, payload, consumed_gen, consumed_at)
    VALUES (v.id, p_name, coalesce(p_payload, 'null'),
            CASE WHEN delivered THEN v.await_gen END, CASE WHEN delivered THEN now() END)
    RETURNING s.signal_id INTO signal_id;
    IF delivered THEN
        e := pgferry.wf_emit(v.id, v.queue, v.priority, v.concurrency_key, v.rate_key, now());
        UPDATE pgferry.wf_instances i
           SET status = e.status, has_slot = e.has_slot, wake = 'signal', awaits = NULL,
               await_deadline = NULL, updated_at = now()
         WHERE i.id = v.id;
        -- Idle workers of the queue claim at once (listen.rs, workflow/wake.rs) instead of
        -- finding the step at their next poll. Delivered at COMMIT, so never before the
        -- step is claimable; one per (transaction, queue).
        IF e.status = 'runnable' THEN
            PERFORM pg_notify('pgferry_wf_ready', v.queue);
        END IF;
    ELSIF v.status = 'queued' THEN
        -- This instance waits for a slot of its key and is locked here until COMMIT; a slot
        -- given back meanwhile skips it (wf_free_slot and wf_rr_promote never wait), and
        -- with no other waiter it stayed free while this one waited for good. So: hold the
        -- key's row (a slot given back after this waits for the commit), and pass on a
        -- slot given back before it, as wf_free_slot does (to the oldest waiter, or to the
        -- key's turn in the picker for round_robin).
        PERFORM 1 FROM pgferry.wf_keys k WHERE k.key = v.concurrency_key FOR UPDATE;
        IF pgferry.wf_take_slot(v.concurrency_key) THEN
            PERFORM pgferry.wf_free_slot(v.concurrency_key);
        END IF;
    END IF;
END $$;
