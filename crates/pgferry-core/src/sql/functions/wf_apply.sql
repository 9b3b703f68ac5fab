
-- Applies one step outcome (an element of wf_finish's array): history row, instance update
-- and what comes next (the next step in the picker, a place among key waiters, parking,
-- children with their first steps, or the end with the parent's join), all in the caller's
-- one statement. Returns false for a stale outcome: the instance is not running this claim
-- any more (cancelled, or its lease expired and the step was claimed again).
--
-- o: {id, seq, outcome: next|retry|sleep|await|spawn|done|fail, step, state, delay_ms,
--     until_ms, signals, timeout_ms, children, join, on_child_failure, result, reason}
-- A `state` that is absent or JSON null keeps the instance's state (clients send null for
-- "no state"); a child's defaults to {}.
CREATE OR REPLACE FUNCTION pgferry.wf_apply(o jsonb) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_id     bigint := (o->>'id')::bigint;
    v_kind   text := o->>'outcome';
    v_parent bigint;
    v        pgferry.wf_instances;
    e        record;
    c        jsonb;
    v_child  bigint;
    v_n      int;
    v_sig    bigint;
    v_status text := 'waiting_children';
    v_slot   boolean := false;
BEGIN
    -- An outcome that may end a child joins its parent: lock the chain root first.
    IF v_kind IN ('done', 'fail', 'retry') THEN
        SELECT i.parent_id INTO v_parent FROM pgferry.wf_instances i WHERE i.id = v_id;
        IF v_parent IS NOT NULL THEN
            PERFORM pgferry.wf_lock_chain(v_parent);
        END IF;
    END IF;
    SELECT * INTO v FROM pgferry.wf_instances i WHERE i.id = v_id FOR UPDATE;
    IF NOT FOUND OR v.status <> 'running' OR v.step_seq <> (o->>'seq')::int THEN
        RETURN false;
    END IF;
    INSERT INTO pgferry.wf_steps (instance_id, step_seq, step, attempt, outcome, error, worker,
                                  started_at)
    VALUES (v.id, v.step_seq, v.step, v.attempt, v_kind, o->>'reason', v.worker,
            v.step_started_at);

    IF v_kind = 'done' THEN
        PERFORM pgferry.wf_end(v.id, 'done', o->'result', NULL);
        RETURN true;
    ELSIF v_kind = 'fail' THEN
        PERFORM pgferry.wf_end(v.id, 'failed', NULL, coalesce(o->>'reason', 'failed'));
        RETURN true;
    ELSIF v_kind = 'retry' AND v.attempt >= v.max_attempts THEN
        PERFORM pgferry.wf_end(v.id, 'failed', NULL,
                               format('%s (attempt %s of %s)', coalesce(o->>'reason', 'retry'),
                                      v.attempt, v.max_attempts));
        RETURN true;
    END IF;

    -- Every other outcome gives its concurrency slot back; a step that runs again now takes
    -- one again behind the key's waiters (wf_emit), so a busy key is served in turn.
    IF v.has_slot THEN
        PERFORM pgferry.wf_free_slot(v.concurrency_key);
    END IF;

    IF v_kind = 'next' THEN
        e := pgferry.wf_emit(v.id, v.queue, v.priority, v.concurrency_key, v.rate_key, now());
        UPDATE pgferry.wf_instances
           SET step = o->>'step', state = coalesce(nullif(o->'state', 'null'::jsonb), state), status = e.status,
               has_slot = e.has_slot, attempt = 1, wake = NULL, updated_at = now()
         WHERE id = v.id;
    ELSIF v_kind = 'retry' THEN
        e := pgferry.wf_emit(v.id, v.queue, v.priority, v.concurrency_key, v.rate_key,
                             now() + make_interval(secs => coalesce((o->>'delay_ms')::float8, 0) / 1000));
        UPDATE pgferry.wf_instances
           SET status = e.status, has_slot = e.has_slot, attempt = attempt + 1,
               error = o->>'reason', updated_at = now()
         WHERE id = v.id;
    ELSIF v_kind = 'sleep' THEN
        -- A sleeper holds no slot; the claim takes one when it wakes.
        UPDATE pgferry.wf_ready SET visible_at = to_timestamp((o->>'until_ms')::float8 / 1000)
         WHERE instance_id = v.id;
        UPDATE pgferry.wf_instances
           SET step = o->>'step', state = coalesce(nullif(o->'state', 'null'::jsonb), state), status = 'sleeping',
               has_slot = false, attempt = 1, wake = NULL, updated_at = now()
         WHERE id = v.id;
    ELSIF v_kind = 'await' THEN
        -- A signal already in the inbox is consumed now (kept if it came early).
        UPDATE pgferry.wf_signals s
           SET consumed_gen = v.step_seq, consumed_at = now()
         WHERE s.signal_id = (SELECT s2.signal_id FROM pgferry.wf_signals s2
                               WHERE s2.instance_id = v.id AND s2.consumed_gen IS NULL
                                 AND s2.name IN (SELECT jsonb_array_elements_text(o->'signals'))
                               ORDER BY s2.signal_id
                               LIMIT 1)
        RETURNING s.signal_id INTO v_sig;
        IF v_sig IS NOT NULL THEN
            e := pgferry.wf_emit(v.id, v.queue, v.priority, v.concurrency_key, v.rate_key, now());
            UPDATE pgferry.wf_instances
               SET step = o->>'step', state = coalesce(nullif(o->'state', 'null'::jsonb), state), status = e.status,
                   has_slot = e.has_slot, attempt = 1, wake = 'signal', await_gen = v.step_seq,
                   awaits = NULL, await_deadline = NULL, updated_at = now()
             WHERE id = v.id;
        ELSE
            IF o->>'timeout_ms' IS NOT NULL THEN
                UPDATE pgferry.wf_ready
                   SET visible_at = now() + make_interval(secs => (o->>'timeout_ms')::float8 / 1000)
                 WHERE instance_id = v.id;
            ELSE
                DELETE FROM pgferry.wf_ready WHERE instance_id = v.id;
            END IF;
            UPDATE pgferry.wf_instances
               SET step = o->>'step', state = coalesce(nullif(o->'state', 'null'::jsonb), state), status = 'awaiting',
                   has_slot = false, attempt = 1, wake = NULL, await_gen = v.step_seq,
                   awaits = ARRAY(SELECT jsonb_array_elements_text(o->'signals')),
                   await_deadline = now() + make_interval(secs => (o->>'timeout_ms')::float8 / 1000),
                   updated_at = now()
             WHERE id = v.id;
        END IF;
    ELSIF v_kind = 'spawn' THEN
        DELETE FROM pgferry.wf_ready WHERE instance_id = v.id;
        v_n := 0;
        FOR c IN SELECT * FROM jsonb_array_elements(o->'children') LOOP
            INSERT INTO pgferry.wf_instances
                   (kind, queue, step, status, state, input, parent_id, parent_gen,
                    concurrency_key, rate_key, priority, max_attempts)
            VALUES (c->>'kind', coalesce(c->>'queue', v.queue), coalesce(c->>'step', 'start'),
                    'runnable', coalesce(nullif(c->'state', 'null'::jsonb), '{}'), coalesce(c->'input', '{}'), v.id,
                    v.step_seq, c->>'concurrency_key', c->>'rate_key',
                    coalesce((c->>'priority')::smallint, v.priority),
                    coalesce((c->>'max_attempts')::int, 25))
            RETURNING id INTO v_child;
            IF c->>'concurrency_key' IS NOT NULL THEN
                INSERT INTO pgferry.wf_keys (key, max)
                VALUES (c->>'concurrency_key', coalesce((c->>'concurrency_limit')::int, 1))
                ON CONFLICT (key) DO NOTHING;
            END IF;
            e := pgferry.wf_emit(v_child, coalesce(c->>'queue', v.queue),
                                 coalesce((c->>'priority')::smallint, v.priority),
                                 c->>'concurrency_key', c->>'rate_key', now());
            IF e.status <> 'runnable' OR e.has_slot THEN
                UPDATE pgferry.wf_instances SET status = e.status, has_slot = e.has_slot
                 WHERE id = v_child;
            END IF;
            v_n := v_n + 1;
        END LOOP;
        IF v_n = 0 THEN
            e := pgferry.wf_emit(v.id, v.queue, v.priority, v.concurrency_key, v.rate_key, now());
            v_status := e.status;
            v_slot := e.has_slot;
        END IF;
        UPDATE pgferry.wf_instances
           SET step = o->>'step', state = coalesce(nullif(o->'state', 'null'::jsonb), state), status = v_status,
               has_slot = v_slot, attempt = 1,
               wake = CASE WHEN v_n = 0 THEN 'children' END,
               join_mode = coalesce(o->>'join', 'all'), join_gen = v.step_seq,
               children_pending = v_n,
               child_failure = coalesce(o->>'on_child_failure', 'fail_parent'),
               updated_at = now()
         WHERE id = v.id;
    ELSE
        RAISE EXCEPTION 'unknown workflow outcome %', v_kind USING ERRCODE = '22023';
    END IF;
    RETURN true;
END $$;
