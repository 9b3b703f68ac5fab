
-- Starts an instance (also callable from any language inside its own transaction: the
-- instance exists, and its first step becomes claimable, only if that transaction commits).
-- An active instance with the same (queue, correlation key) is returned instead, with
-- duplicate = true; the unique partial index decides between concurrent starts.
CREATE OR REPLACE FUNCTION pgferry.wf_start(
    p_kind text, p_queue text, p_step text, p_input jsonb, p_state jsonb,
    p_correlation_key text, p_concurrency_key text, p_concurrency_limit int,
    p_rate_key text, p_priority smallint, p_run_at timestamptz, p_max_attempts int,
    OUT id bigint, OUT duplicate boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    e record;
BEGIN
    duplicate := false;
    LOOP
        INSERT INTO pgferry.wf_instances AS i
               (kind, queue, step, status, state, input, correlation_key, concurrency_key,
                rate_key, priority, max_attempts)
        VALUES (p_kind, p_queue, p_step, 'runnable', coalesce(p_state, '{}'),
                coalesce(p_input, '{}'), p_correlation_key, p_concurrency_key, p_rate_key,
                coalesce(p_priority, 0), coalesce(p_max_attempts, 25))
        ON CONFLICT (queue, correlation_key) WHERE active AND correlation_key IS NOT NULL
        DO NOTHING
        RETURNING i.id INTO id;
        EXIT WHEN id IS NOT NULL;
        -- The holder may have ended between the conflict and this read: then try again.
        SELECT i.id INTO id FROM pgferry.wf_instances i
         WHERE i.queue = p_queue AND i.correlation_key = p_correlation_key AND i.active;
        IF id IS NOT NULL THEN
            duplicate := true;
            RETURN;
        END IF;
    END LOOP;
    IF p_concurrency_key IS NOT NULL THEN
        INSERT INTO pgferry.wf_keys (key, max) VALUES (p_concurrency_key, coalesce(p_concurrency_limit, 1))
        ON CONFLICT (key) DO NOTHING;
    END IF;
    e := pgferry.wf_emit(id, p_queue, coalesce(p_priority, 0)::smallint, p_concurrency_key,
                         p_rate_key, coalesce(p_run_at, now()));
    IF e.status <> 'runnable' OR e.has_slot THEN
        UPDATE pgferry.wf_instances SET status = e.status, has_slot = e.has_slot
         WHERE wf_instances.id = wf_start.id;
    END IF;
END $$;
