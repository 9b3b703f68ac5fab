
-- The picker: claims up to p_max due steps of a queue, highest priority first, oldest due
-- first, in one statement. Each priority is an equality probe on wf_ready_pick that stops at
-- the batch or at the first row not yet due; rows being claimed or changed by someone else
-- are skipped, never waited for. A claim moves the row's visible_at to the lease's end: if
-- the worker never answers, the row comes due again and the step is claimed again (attempt
-- + 1, and the late answer is stale because step_seq moved on).
-- Returns the instance, and only for kinds that declared them (wf_kinds.caps) the signals
-- that resumed it and its children's results.
--
-- The claim commits with synchronous_commit = off (ADR 0018): it acknowledges nothing to a
-- user, and a claim lost in a crash is a lease that was never taken, so its step is due and
-- claimed again, as after a lapsed lease (at least once). Its outcome can never be durable
-- without it: the outcome commits synchronously, and that flushes the WAL in order, the
-- claim's records first. This takes a WAL flush off every step and off a resumed signal's
-- path to its handler.
CREATE OR REPLACE FUNCTION pgferry.wf_claim(p_queue text, p_max int, p_worker text, p_lease_ms int)
RETURNS TABLE (id bigint, kind text, step text, state jsonb, input jsonb, attempt int,
               max_attempts int, step_seq int, wake text, parent_id bigint,
               inbox jsonb, children jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids     bigint[];
    v_slotted bigint[] := '{}';
    w         record;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT coalesce(array_agg(x.instance_id), '{}') INTO v_ids
      FROM generate_series(9, 0, -1) p
     CROSS JOIN LATERAL (
           SELECT r.instance_id
             FROM pgferry.wf_ready r
             JOIN pgferry.wf_instances i ON i.id = r.instance_id
            WHERE r.queue = p_queue AND r.priority = p AND r.visible_at <= now()
            ORDER BY r.visible_at
            LIMIT p_max
              FOR UPDATE OF r, i SKIP LOCKED) x
     LIMIT p_max;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    -- Steps that came due by time (a sleep, an await deadline, a delayed retry) and have a
    -- concurrency key take their slot now, or wait for one among the key's waiters.
    FOR w IN SELECT i.id, i.concurrency_key FROM pgferry.wf_instances i
              WHERE i.id = ANY (v_ids) AND i.concurrency_key IS NOT NULL AND NOT i.has_slot
              ORDER BY i.concurrency_key, i.id
    LOOP
        IF pgferry.wf_take_slot(w.concurrency_key) THEN
            v_slotted := v_slotted || w.id;
        ELSE
            DELETE FROM pgferry.wf_ready WHERE instance_id = w.id;
            INSERT INTO pgferry.wf_key_waiters (key, instance_id) VALUES (w.concurrency_key, w.id);
            UPDATE pgferry.wf_instances SET status = 'queued', updated_at = now() WHERE id = w.id;
            v_ids := array_remove(v_ids, w.id);
        END IF;
    END LOOP;
    RETURN QUERY
    WITH leased AS (
        UPDATE pgferry.wf_ready r
           SET visible_at = now() + make_interval(secs => p_lease_ms / 1000.0)
         WHERE r.instance_id = ANY (v_ids)
    ), claimed AS (
        UPDATE pgferry.wf_instances i
           SET status = 'running',
               step_seq = i.step_seq + 1,
               attempt = CASE WHEN i.status = 'running' THEN i.attempt + 1 ELSE i.attempt END,
               wake = CASE WHEN i.status = 'awaiting' THEN 'timeout' ELSE i.wake END,
               awaits = CASE WHEN i.status = 'awaiting' THEN NULL ELSE i.awaits END,
               has_slot = i.has_slot OR i.id = ANY (v_slotted),
               worker = p_worker, step_started_at = now(), updated_at = now()
         WHERE i.id = ANY (v_ids)
        RETURNING i.id, i.kind, i.step, i.state, i.input, i.attempt, i.max_attempts,
                  i.step_seq, i.wake, i.parent_id, i.await_gen, i.join_gen
    )
    SELECT c.id, c.kind, c.step, c.state, c.input, c.attempt, c.max_attempts, c.step_seq,
           c.wake, c.parent_id,
           CASE WHEN k.caps & 1 <> 0 AND c.wake = 'signal' THEN
               (SELECT jsonb_agg(jsonb_build_object('signal_id', s.signal_id, 'name', s.name,
                                                    'payload', s.payload) ORDER BY s.signal_id)
                  FROM pgferry.wf_signals s
                 WHERE s.instance_id = c.id AND s.consumed_gen = c.await_gen)
           END,
           CASE WHEN k.caps & 2 <> 0 AND c.wake = 'children' THEN
               (SELECT jsonb_agg(jsonb_build_object('id', ch.id, 'kind', ch.kind,
                                                    'status', ch.status, 'result', ch.result,
                                                    'error', ch.error) ORDER BY ch.id)
                  FROM pgferry.wf_instances ch
                 WHERE ch.parent_id = c.id AND ch.parent_gen = c.join_gen)
           END
      FROM claimed c
      LEFT JOIN pgferry.wf_kinds k ON k.kind = c.kind;
END $$;
