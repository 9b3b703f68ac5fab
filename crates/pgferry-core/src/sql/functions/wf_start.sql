
-- Starts an instance (also callable from any language inside its own transaction: the
-- instance exists, and its first step becomes claimable, only if that transaction commits).
-- An active instance with the same (queue, correlation key) is returned instead, with
-- duplicate = true; the unique partial index decides between concurrent starts.
--
-- p_concurrency_strategy (when this start creates its key, or changes it when given):
-- what a start whose key has no free slot does. 'queue' (the default): its first step
-- waits among the key's waiters. 'cancel_in_progress': the oldest active instance holding
-- a slot of the key is cancelled (with its descendants) and this one takes its slot (the
-- key's waiters keep their turn). 'cancel_newest': this instance is cancelled at once (it
-- exists, status cancelled, so the caller can see what became of it). 'round_robin': as
-- 'queue' within the key, and the keys take turns in the picker: the key keeps one step
-- there, its others wait among its waiters (wf_take_slot, wf_claim).
CREATE OR REPLACE FUNCTION pgferry.wf_start(
    p_kind text, p_queue text, p_step text, p_input jsonb, p_state jsonb,
    p_correlation_key text, p_concurrency_key text, p_concurrency_limit int,
    p_rate_key text, p_priority smallint, p_run_at timestamptz, p_max_attempts int,
    p_concurrency_strategy text DEFAULT NULL,
    OUT id bigint, OUT duplicate boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    e          record;
    v_strategy text := 'queue';
    v_change   boolean := false;
    -- A start due now on a cancel_in_progress key: takes the key's turn and cancels holders.
    v_cancels  boolean := false;
    v_holder   bigint;
    v_n        int := 0;
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
        -- No lock on the key's row unless its strategy changes: outcomes lock an instance,
        -- then its key's row (wf_free_slot), and a start that cancels holders locks them
        -- (wf_cancel) before the key's row too.
        INSERT INTO pgferry.wf_keys (key, max, strategy)
        VALUES (p_concurrency_key, coalesce(p_concurrency_limit, 1),
                coalesce(p_concurrency_strategy, 'queue'))
        ON CONFLICT (key) DO NOTHING;
        SELECT k.strategy INTO v_strategy FROM pgferry.wf_keys k WHERE k.key = p_concurrency_key;
        v_change := p_concurrency_strategy IS NOT NULL AND v_strategy <> p_concurrency_strategy;
        v_strategy := coalesce(p_concurrency_strategy, v_strategy);
        v_cancels := v_strategy = 'cancel_in_progress' AND coalesce(p_run_at, now()) <= now();
        -- Starts that cancel on one key take turns (a transaction-scoped advisory lock on
        -- the key): two of them cancelling each other's holders would deadlock. The turn is
        -- taken before this start locks the key's row (the strategy's change below), as
        -- every start that takes it does: a start holding the turn then locks the key's
        -- row (wf_take_slot, wf_free_slot), so one that locked the row first and waited for
        -- the turn deadlocked with it (seen when a start read the old strategy just before
        -- another start's change committed, and changed it again).
        IF v_cancels THEN
            PERFORM pg_advisory_xact_lock(hashtextextended('pgferry.wf_key/' || p_concurrency_key, 0));
        END IF;
        IF v_change THEN
            -- A representative in the picker (round_robin) means nothing to another strategy.
            -- Changed only if still different: a start that read the old strategy while
            -- another changed it re-checks the committed row and leaves it (and its lock).
            UPDATE pgferry.wf_keys SET strategy = p_concurrency_strategy, rep = NULL
             WHERE key = p_concurrency_key AND strategy <> p_concurrency_strategy;
        END IF;
    END IF;
    -- Only a step due now takes a slot at its start (wf_emit); one due later takes it when
    -- claimed, and the strategies act on starts.
    IF v_cancels THEN
        LOOP
            EXIT WHEN (SELECT k.running < k.max FROM pgferry.wf_keys k WHERE k.key = p_concurrency_key);
            -- The oldest holder, found without a lock: wf_cancel takes its locks root
            -- first, as every statement that ends an instance does.
            SELECT i.id INTO v_holder FROM pgferry.wf_instances i
             WHERE i.concurrency_key = p_concurrency_key AND i.active AND i.has_slot
               AND i.id <> wf_start.id
             ORDER BY i.id
             LIMIT 1;
            EXIT WHEN v_holder IS NULL OR v_n >= 10;
            v_n := v_n + 1;
            -- This instance goes to the front of the key's waiters, so the slot the cancel
            -- frees passes to it (wf_free_slot), not to an older waiter: the key's other
            -- waiters are not in progress and keep their turn.
            INSERT INTO pgferry.wf_key_waiters (key, seq, instance_id) OVERRIDING SYSTEM VALUE
            SELECT p_concurrency_key, coalesce(min(kw.seq), 0) - 1, wf_start.id
              FROM pgferry.wf_key_waiters kw WHERE kw.key = p_concurrency_key;
            UPDATE pgferry.wf_instances SET status = 'queued' WHERE wf_instances.id = wf_start.id;
            PERFORM pgferry.wf_cancel(v_holder, format(
                'cancelled by newer instance %s on concurrency key %s (cancel_in_progress)',
                id, p_concurrency_key));
            IF (SELECT i.has_slot FROM pgferry.wf_instances i WHERE i.id = wf_start.id) THEN
                RETURN;  -- promoted: runnable, in the picker, holding the slot
            END IF;
            -- The holder had ended meanwhile (and its slot went elsewhere): look again.
            DELETE FROM pgferry.wf_key_waiters kw WHERE kw.instance_id = wf_start.id;
            UPDATE pgferry.wf_instances SET status = 'runnable' WHERE wf_instances.id = wf_start.id;
        END LOOP;
    END IF;
    e := pgferry.wf_emit(id, p_queue, coalesce(p_priority, 0)::smallint, p_concurrency_key,
                         p_rate_key, coalesce(p_run_at, now()));
    IF e.status <> 'runnable' OR e.has_slot THEN
        UPDATE pgferry.wf_instances SET status = e.status, has_slot = e.has_slot
         WHERE wf_instances.id = wf_start.id;
    END IF;
    IF e.status = 'queued' AND v_strategy = 'cancel_newest' THEN
        INSERT INTO pgferry.wf_steps (instance_id, step_seq, step, attempt, outcome, error)
        VALUES (id, 0, p_step, 1, 'cancelled', 'concurrency key ' || p_concurrency_key || ' is full (cancel_newest)');
        PERFORM pgferry.wf_end(id, 'cancelled', NULL,
                               'concurrency key ' || p_concurrency_key || ' is full (cancel_newest)');
    END IF;
END $$;
