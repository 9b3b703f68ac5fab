
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
LANGUAGE plpgsql
-- Every statement has an index made for it, and the updates find the batch's rows by ctid:
-- a TID scan of n rows is costed as n random page reads, more than a scan of a small
-- wf_ready, which the picker table stays, but each such scan would read every row of it.
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids     bigint[];
    v_rtids   tid[];
    v_itids   tid[];
    v_keyed   boolean;
    v_slotted bigint[] := '{}';
    v_rr      text[] := '{}';
    v_alive   text[];
    v_more    bigint[];
    v_keys    text[];
    v_seqs    bigint[];
    v_share   int;
    w         record;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    -- At most p_max in all (the LIMIT is on the rows, before they are gathered: the
    -- priorities after the batch is full are not walked, and nothing past it is locked).
    -- The locked rows' ctids: nothing else can move them before this statement's updates,
    -- which find them by ctid instead of by key (two index descents per step fewer).
    SELECT coalesce(array_agg(x.instance_id), '{}'), coalesce(array_agg(x.rt), '{}'),
           coalesce(array_agg(x.it), '{}'), coalesce(bool_or(x.keyed), false)
      INTO v_ids, v_rtids, v_itids, v_keyed
      FROM (SELECT x.instance_id, x.rt, x.it, x.keyed
              FROM generate_series(9, 0, -1) p
             CROSS JOIN LATERAL (
                   SELECT r.instance_id, r.ctid AS rt, i.ctid AS it,
                          i.concurrency_key IS NOT NULL AS keyed
                     FROM pgferry.wf_ready r
                     JOIN pgferry.wf_instances i ON i.id = r.instance_id
                    WHERE r.queue = p_queue AND r.priority = p AND r.visible_at <= now()
                    ORDER BY r.visible_at
                    LIMIT p_max
                      FOR UPDATE OF r, i SKIP LOCKED) x
             LIMIT p_max) x;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    -- Only a batch with a keyed instance has slots to take (the picker saw its key).
    IF v_keyed THEN
        -- Steps that came due by time (a sleep, an await deadline, a delayed retry) and have a
        -- concurrency key take their slot now, or wait for one among the key's waiters. A
        -- round_robin key is served once here (its representative, or one step due by time);
        -- its other steps due by time wait their turn among its waiters. Key rows are locked in
        -- key order (wf_take_slot, and FOR UPDATE for round_robin keys), as every claim does.
        FOR w IN SELECT i.id, i.concurrency_key AS key, i.has_slot,
                        k.strategy = 'round_robin' AS rr
                   FROM pgferry.wf_instances i
                   JOIN pgferry.wf_keys k ON k.key = i.concurrency_key
                  WHERE i.id = ANY (v_ids) AND i.concurrency_key IS NOT NULL
                    AND (NOT i.has_slot OR k.strategy = 'round_robin')
                  ORDER BY i.concurrency_key, i.has_slot DESC, i.id
        LOOP
            IF w.rr THEN
                IF NOT (w.key = ANY (v_rr)) THEN
                    PERFORM 1 FROM pgferry.wf_keys k WHERE k.key = w.key FOR UPDATE;
                    IF w.has_slot THEN
                        v_rr := v_rr || w.key;
                        CONTINUE;
                    ELSIF pgferry.wf_take_slot(w.key) THEN
                        v_rr := v_rr || w.key;
                        v_slotted := v_slotted || w.id;
                        CONTINUE;
                    END IF;
                ELSIF w.has_slot THEN
                    CONTINUE;  -- a lapsed lease claimed again: it holds its slot
                END IF;
            ELSIF pgferry.wf_take_slot(w.key) THEN
                v_slotted := v_slotted || w.id;
                CONTINUE;
            END IF;
            DELETE FROM pgferry.wf_ready WHERE instance_id = w.id;
            INSERT INTO pgferry.wf_key_waiters (key, instance_id) VALUES (w.key, w.id);
            UPDATE pgferry.wf_instances SET status = 'queued', updated_at = now() WHERE id = w.id;
            v_ids := array_remove(v_ids, w.id);
        END LOOP;
        IF cardinality(v_rr) > 0 THEN
            -- The round_robin keys served: a representative claimed leaves the picker.
            UPDATE pgferry.wf_keys k SET rep = NULL WHERE k.key = ANY (v_rr) AND k.rep = ANY (v_ids);
            -- A claim with room serves those keys' waiters too, an equal share per key per
            -- round, within their free slots: the picker holds one step per key, and a batch
            -- still fills from a key with a backlog (the picker had nothing else due).
            v_alive := v_rr;
            WHILE cardinality(v_ids) < p_max AND cardinality(v_alive) > 0 LOOP
                v_share := ceil((p_max - cardinality(v_ids))::numeric / cardinality(v_alive));
                SELECT coalesce(array_agg(x.instance_id), '{}'), coalesce(array_agg(k.key), '{}'),
                       coalesce(array_agg(x.seq), '{}')
                  INTO v_more, v_keys, v_seqs
                  FROM pgferry.wf_keys k
                 CROSS JOIN LATERAL (
                       SELECT kw.seq, kw.instance_id
                         FROM pgferry.wf_key_waiters kw
                         JOIN pgferry.wf_instances i ON i.id = kw.instance_id
                        WHERE kw.key = k.key AND i.queue = p_queue
                        ORDER BY kw.seq
                        LIMIT least(v_share, k.max - k.running)
                          FOR UPDATE OF kw, i SKIP LOCKED) x
                 WHERE k.key = ANY (v_alive) AND k.running < k.max;
                EXIT WHEN cardinality(v_more) = 0;
                DELETE FROM pgferry.wf_key_waiters kw
                 USING unnest(v_keys, v_seqs) AS u(key, seq)
                 WHERE kw.key = u.key AND kw.seq = u.seq;
                -- One update per key (a primary-key probe each; a few keys per round).
                FOR w IN SELECT t.key, count(*)::int AS n FROM unnest(v_keys) AS t(key) GROUP BY t.key
                LOOP
                    UPDATE pgferry.wf_keys k SET running = k.running + w.n WHERE k.key = w.key;
                END LOOP;
                INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
                SELECT i.id, i.queue, i.priority, now()
                  FROM pgferry.wf_instances i WHERE i.id = ANY (v_more)
                ON CONFLICT (instance_id) DO UPDATE SET visible_at = EXCLUDED.visible_at;
                v_ids := v_ids || v_more;
                v_slotted := v_slotted || v_more;
                v_alive := ARRAY(SELECT t.key FROM unnest(v_keys) AS t(key)
                                  GROUP BY t.key HAVING count(*) = v_share);
            END LOOP;
            -- Each key with more waiters and a free slot puts its next representative at the
            -- back of the picker's line.
            FOR w IN SELECT k.key FROM pgferry.wf_keys k
                      WHERE k.key = ANY (v_rr) AND k.rep IS NULL AND k.running < k.max
                      ORDER BY k.key
            LOOP
                PERFORM pgferry.wf_rr_promote(w.key);
            END LOOP;
        END IF;
        -- The loop above moved some picked rows and the round-robin rounds added
        -- others: the updates below find this batch's rows by their ctids as they are now
        -- (all locked by this transaction).
        SELECT coalesce(array_agg(r.ctid), '{}') INTO v_rtids
          FROM pgferry.wf_ready r WHERE r.instance_id = ANY (v_ids);
        SELECT coalesce(array_agg(i.ctid), '{}') INTO v_itids
          FROM pgferry.wf_instances i WHERE i.id = ANY (v_ids);
    END IF;
    RETURN QUERY
    WITH leased AS (
        UPDATE pgferry.wf_ready r
           SET visible_at = now() + make_interval(secs => p_lease_ms / 1000.0)
         WHERE r.ctid = ANY (v_rtids)
    ), claimed AS (
        UPDATE pgferry.wf_instances i
           SET status = 'running',
               step_seq = i.step_seq + 1,
               attempt = CASE WHEN i.status = 'running' THEN i.attempt + 1 ELSE i.attempt END,
               wake = CASE WHEN i.status = 'awaiting' THEN 'timeout' ELSE i.wake END,
               awaits = CASE WHEN i.status = 'awaiting' THEN NULL ELSE i.awaits END,
               has_slot = i.has_slot OR i.id = ANY (v_slotted),
               worker = p_worker, step_started_at = now(), updated_at = now()
         WHERE i.ctid = ANY (v_itids)
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
