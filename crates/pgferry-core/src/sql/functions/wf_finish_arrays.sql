
-- Applies a batch of step outcomes in one statement, given as aligned arrays (one element
-- per outcome); returns per outcome, in the given order, whether it was applied or stale
-- (docs/adr/0016-set-based-outcomes.md). pgferry.wf_finish(jsonb), the call other languages
-- make with one JSON array, takes its arrays apart into these and calls this.
--
-- The arrays: the instance and the step_seq of the claim it answers; the outcome's kind
-- (next, retry, sleep, done, await, spawn, fail); the next step and the state (next and
-- sleep; a NULL or JSON null state keeps the instance's); the result (done); the lease of
-- a `next` that asks to continue (ms, NULL: it does not) and whether to renew it; and
-- p_rest, the outcome as wf_apply takes it (its JSON object), for every kind but next and
-- done (NULL for those: it is built here when one of them is not plain). The engine sends
-- these arrays as they are (binary bigint, int, text and jsonb elements): one JSON array
-- of objects cost its Bind a parse of every key and number of the batch, 0.6 ms per 200
-- continued steps, about a tenth of the statement (docs/performance.md "Outcomes in
-- arrays").
--
-- The common outcomes of an instance that touches nothing shared are applied set-based,
-- a handful of statements for the whole batch (the "plain" part below): `next` and
-- `retry` (within max_attempts) without a concurrency or rate key, `sleep` without a held
-- slot, and `done` of an instance with no parent that never spawned (so it has no
-- children to cancel and no join to make). Such an outcome writes its history row, its
-- picker row and its instance row and nothing else, so the batch's rows can be written
-- together and their order does not matter.
--
-- Everything else (await, spawn, fail, keyed or rate-limited steps, a child's end with
-- its parent's join, a retry past max_attempts) goes through wf_apply one by one, in the
-- given order, after the plain part (the engine orders a batch by parent, then instance,
-- so that batches take their locks in one order).
--
-- A plain `next` that asks to continue (p_leases: the worker's lease, ADR 0016 addendum
-- "Continued steps") is not put back in the picker: its next step is claimed by the same
-- statement, for the same worker, and returned in the `cont_*` columns (those a claim
-- returns). It skips the picker row's two updates (due now, then leased) and the picker's
-- walk and locks. Its picker row keeps the lease it has unless the outcome asks to renew
-- it (p_renew: the worker renews when less than half is left by its clock), so a
-- continued step has at least half its lease; a worker that dies mid-chain leaves a row
-- that comes due, as after any claim.
--
-- The answers of the plain part are one array of rows (pgferry.wf_finish_answer, migration
-- 0028) in the given order, returned as they are when the whole batch was plain: one sort
-- of the batch, where ten aligned arrays took ten, each copying every continued step's
-- state and input (docs/performance.md "One array of answers"). A continued step is
-- answered in the cont_* columns (cont_step_seq NULL: the outcome did not continue), not
-- as a jsonb object built per step, which took its state and input apart and put them
-- together again (migration 0026).
CREATE OR REPLACE FUNCTION pgferry.wf_finish_arrays(
    p_ids bigint[], p_seqs int[], p_outcomes text[], p_steps text[], p_states jsonb[],
    p_results jsonb[], p_leases float8[], p_renew boolean[], p_rest jsonb[])
RETURNS TABLE (id bigint, applied boolean, cont_kind text, cont_step text, cont_state jsonb,
               cont_input jsonb, cont_attempt int, cont_max_attempts int, cont_step_seq int,
               cont_parent_id bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ans   pgferry.wf_finish_answer[];
    v_ids   bigint[];
    v_k     int := 1;
    v_len   int := coalesce(cardinality(p_ids), 0);
    k       int;
    n       bigint;
BEGIN
    IF coalesce(cardinality(p_seqs), 0) <> v_len OR coalesce(cardinality(p_outcomes), 0) <> v_len
       OR coalesce(cardinality(p_steps), 0) <> v_len OR coalesce(cardinality(p_states), 0) <> v_len
       OR coalesce(cardinality(p_results), 0) <> v_len OR coalesce(cardinality(p_leases), 0) <> v_len
       OR coalesce(cardinality(p_renew), 0) <> v_len OR coalesce(cardinality(p_rest), 0) <> v_len THEN
        RAISE EXCEPTION 'wf_finish_arrays: the outcome arrays differ in length (% ids)', v_len
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH b AS (
        -- One outcome per instance (a repeated one is stale, below, as it always was).
        SELECT DISTINCT ON (t.id)
               t.id, t.seq, t.kind, t.step, t.state, t.result, t.rest, t.n,
               CASE WHEN t.kind = 'next' THEN t.lease_ms END AS lease_ms,
               coalesce(t.renew, false) AS renew
          FROM unnest(p_ids, p_seqs, p_outcomes, p_steps, p_states, p_results, p_leases,
                      p_renew, p_rest)
               WITH ORDINALITY AS t(id, seq, kind, step, state, result, lease_ms, renew, rest, n)
         WHERE t.kind IN ('next', 'retry', 'sleep', 'done')
         ORDER BY t.id, t.n
    ), moved AS (
        -- The plain outcomes' instances, read, locked and moved by this one update (in id
        -- order, b's): a row changed meanwhile (cancelled, claimed again) is re-checked on
        -- its new version and falls out (stale, in wf_apply). No read before it and no
        -- FOR UPDATE (ADR 0016, addendum "The update is the lock"): the step that ran is
        -- kept in the prev_* columns, because RETURNING sees only the new row and the
        -- history row below needs the old one (not its worker: this update never changes
        -- it).
        UPDATE pgferry.wf_instances i
           SET step = CASE WHEN b.kind IN ('next', 'sleep') THEN b.step ELSE i.step END,
               state = CASE WHEN b.kind IN ('next', 'sleep')
                            THEN coalesce(nullif(b.state, 'null'::jsonb), i.state)
                            ELSE i.state END,
               status = CASE WHEN b.lease_ms IS NOT NULL THEN 'running'
                             WHEN b.kind = 'sleep' THEN 'sleeping' WHEN b.kind = 'done' THEN 'done'
                             ELSE 'runnable' END,
               -- A continued step is claimed here: a late answer to the step just
               -- finished is stale, as after any claim.
               step_seq = CASE WHEN b.lease_ms IS NOT NULL THEN i.step_seq + 1
                               ELSE i.step_seq END,
               step_started_at = CASE WHEN b.lease_ms IS NOT NULL THEN now()
                                      ELSE i.step_started_at END,
               attempt = CASE b.kind WHEN 'retry' THEN i.attempt + 1 WHEN 'done' THEN i.attempt
                                     ELSE 1 END,
               wake = CASE WHEN b.kind = 'retry' THEN i.wake END,
               error = CASE b.kind WHEN 'retry' THEN b.rest->>'reason' WHEN 'done' THEN NULL
                                   ELSE i.error END,
               active = b.kind <> 'done',
               result = CASE WHEN b.kind = 'done' THEN b.result ELSE i.result END,
               awaits = CASE WHEN b.kind = 'done' THEN NULL ELSE i.awaits END,
               await_deadline = CASE WHEN b.kind = 'done' THEN NULL ELSE i.await_deadline END,
               finished_at = CASE WHEN b.kind = 'done' THEN now() ELSE i.finished_at END,
               updated_at = now(),
               prev_step = i.step, prev_attempt = i.attempt, prev_started_at = i.step_started_at
          FROM b
         WHERE i.id = b.id AND i.status = 'running' AND i.step_seq = b.seq AND NOT i.has_slot
           AND CASE b.kind
                 WHEN 'next' THEN i.concurrency_key IS NULL AND i.rate_key IS NULL
                 WHEN 'retry' THEN i.concurrency_key IS NULL AND i.rate_key IS NULL
                                   AND i.attempt < i.max_attempts
                 WHEN 'sleep' THEN true
                 WHEN 'done' THEN i.parent_id IS NULL AND i.join_gen IS NULL
               END
        RETURNING b.n, i.id, b.lease_ms IS NOT NULL AS cont, i.kind, i.step, i.state, i.input,
                  i.attempt, i.max_attempts, i.step_seq, i.parent_id, b.kind AS outcome,
                  b.rest, b.renew, b.lease_ms, i.queue, i.priority, b.seq AS old_seq,
                  i.prev_step AS old_step, i.prev_attempt AS old_attempt,
                  i.worker AS old_worker, i.prev_started_at AS old_started
    ), history AS (
        INSERT INTO pgferry.wf_steps (instance_id, step_seq, step, attempt, outcome, error,
                                      worker, started_at)
        SELECT m.id, m.old_seq, m.old_step, m.old_attempt, m.outcome, m.rest->>'reason',
               m.old_worker, m.old_started
          FROM moved m
    ), picker AS (
        -- The row the claim leased comes due again: now, after the delay, or at the wake-up.
        INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
        SELECT m.id, m.queue, m.priority,
               CASE m.outcome
                 WHEN 'next' THEN now()
                 WHEN 'retry' THEN now() + make_interval(
                                       secs => coalesce((m.rest->>'delay_ms')::float8, 0) / 1000)
                 ELSE to_timestamp((m.rest->>'until_ms')::float8 / 1000)
               END
          FROM moved m
         WHERE m.outcome <> 'done' AND m.lease_ms IS NULL
        ON CONFLICT (instance_id) DO UPDATE SET visible_at = EXCLUDED.visible_at
    ), renewed AS (
        -- A continued step's lease is written only when its worker asks ("renew_lease":
        -- less than half of the lease it took is left by the worker's clock, counted from
        -- before it sent the claim or the last renewal). Otherwise its picker row keeps
        -- the lease it has and is not read: the worker knows when it took it (ADR 0016,
        -- addendum "The update is the lock"). A missing row (never while running) is put
        -- back by the renewal.
        INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
        SELECT m.id, m.queue, m.priority, now() + make_interval(secs => m.lease_ms / 1000)
          FROM moved m
         WHERE m.lease_ms IS NOT NULL AND m.renew
        ON CONFLICT (instance_id) DO UPDATE SET visible_at = EXCLUDED.visible_at
    ), ended AS (
        DELETE FROM pgferry.wf_ready r USING moved m
         WHERE r.instance_id = m.id AND m.outcome = 'done'
    )
    -- The plain outcomes' answers, in the given order, as one array of rows (one sort); a
    -- continued step's columns, NULL for the others.
    SELECT coalesce(array_agg(ROW(m.n, m.id, CASE WHEN m.cont THEN m.kind END,
                                  CASE WHEN m.cont THEN m.step END,
                                  CASE WHEN m.cont THEN m.state END,
                                  CASE WHEN m.cont THEN m.input END,
                                  CASE WHEN m.cont THEN m.attempt END,
                                  CASE WHEN m.cont THEN m.max_attempts END,
                                  CASE WHEN m.cont THEN m.step_seq END,
                                  CASE WHEN m.cont THEN m.parent_id END
                              )::pgferry.wf_finish_answer ORDER BY m.n), '{}')
      INTO v_ans
      FROM moved m;

    -- The common batch is all plain: its answers are that array, with no loop.
    IF cardinality(v_ans) = v_len THEN
        RETURN QUERY SELECT u.id, true, u.kind, u.step, u.state, u.input, u.attempt,
                            u.max_attempts, u.step_seq, u.parent_id
                       FROM unnest(v_ans) AS u;
        RETURN;
    END IF;
    v_ids := ARRAY(SELECT u.id FROM unnest(v_ans) AS u);

    -- The rest take their instances' locks before any key's row: first the chains of the
    -- parents their end may join (root first, as wf_lock_chain does), then the instances
    -- in id order. A cancel locks its instance and then its key; a batch that held a key
    -- (an earlier outcome gave its slot back) while it waited for an instance being
    -- cancelled would deadlock with that cancel.
    FOR n IN SELECT DISTINCT i.parent_id
               FROM unnest(p_ids, p_outcomes) AS t(id, kind)
               JOIN pgferry.wf_instances i ON i.id = t.id
              WHERE i.parent_id IS NOT NULL AND t.kind IN ('done', 'fail', 'retry')
                AND i.id <> ALL (v_ids)
              ORDER BY 1
    LOOP
        PERFORM pgferry.wf_lock_chain(n);
    END LOOP;
    PERFORM 1 FROM pgferry.wf_instances i
     WHERE i.id = ANY (p_ids)
       AND i.id <> ALL (v_ids)
     ORDER BY i.id
       FOR UPDATE;

    -- The rest, one by one in the given order; answers in the given order.
    FOR k IN 1 .. v_len LOOP
        id := p_ids[k];
        IF v_k <= cardinality(v_ans) AND v_ans[v_k].n = k THEN
            applied := true;
            cont_kind := v_ans[v_k].kind;
            cont_step := v_ans[v_k].step;
            cont_state := v_ans[v_k].state;
            cont_input := v_ans[v_k].input;
            cont_attempt := v_ans[v_k].attempt;
            cont_max_attempts := v_ans[v_k].max_attempts;
            cont_step_seq := v_ans[v_k].step_seq;
            cont_parent_id := v_ans[v_k].parent_id;
            v_k := v_k + 1;
        ELSE
            -- wf_apply takes the outcome's JSON object: p_rest's, or for a next or a done
            -- that was not plain (keyed, a child's end) the object these arrays came from.
            applied := pgferry.wf_apply(coalesce(p_rest[k], CASE p_outcomes[k]
                WHEN 'next' THEN jsonb_build_object('id', p_ids[k], 'seq', p_seqs[k],
                                                    'outcome', 'next', 'step', p_steps[k],
                                                    'state', p_states[k])
                ELSE jsonb_build_object('id', p_ids[k], 'seq', p_seqs[k],
                                        'outcome', p_outcomes[k], 'result', p_results[k])
            END));
            cont_kind := NULL; cont_step := NULL; cont_state := NULL; cont_input := NULL;
            cont_attempt := NULL; cont_max_attempts := NULL; cont_step_seq := NULL;
            cont_parent_id := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
END $$;
