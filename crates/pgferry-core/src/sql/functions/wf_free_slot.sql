
-- Gives back a slot of a concurrency key: the oldest waiter takes it over and becomes
-- runnable in the same statement, or the key's count goes down. Waiters locked by someone
-- else (being cancelled) are skipped, never waited for.
-- A round_robin key passes the slot on only when it has no representative in the picker
-- (the one it had ended, or was claimed): otherwise the slot stays free for the claim that
-- takes the representative, which serves the key's waiters in its turn (migration 0019).
CREATE OR REPLACE FUNCTION pgferry.wf_free_slot(p_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w record;
    k record;
BEGIN
    SELECT kk.strategy, kk.rep INTO k FROM pgferry.wf_keys kk WHERE kk.key = p_key FOR UPDATE;
    IF k.strategy = 'round_robin' THEN
        -- A representative that ended (cancelled: wf_end cleared its slot) is one no more.
        IF k.rep IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM pgferry.wf_instances i
                WHERE i.id = k.rep AND i.status = 'runnable' AND i.has_slot) THEN
            k.rep := NULL;
            UPDATE pgferry.wf_keys SET rep = NULL WHERE key = p_key;
        END IF;
        UPDATE pgferry.wf_keys SET running = running - 1 WHERE key = p_key AND running > 0;
        IF k.rep IS NULL THEN
            PERFORM pgferry.wf_rr_promote(p_key);
        END IF;
        RETURN;
    END IF;
    SELECT kw.seq, i.id, i.queue, i.priority INTO w
      FROM pgferry.wf_key_waiters kw
      JOIN pgferry.wf_instances i ON i.id = kw.instance_id
     WHERE kw.key = p_key
     ORDER BY kw.seq
     LIMIT 1
       FOR UPDATE OF kw, i SKIP LOCKED;
    IF FOUND THEN
        DELETE FROM pgferry.wf_key_waiters WHERE key = p_key AND seq = w.seq;
        INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
        VALUES (w.id, w.queue, w.priority, now())
        ON CONFLICT (instance_id) DO UPDATE SET visible_at = EXCLUDED.visible_at;
        UPDATE pgferry.wf_instances
           SET status = 'runnable', has_slot = true, updated_at = now()
         WHERE id = w.id;
    ELSE
        UPDATE pgferry.wf_keys SET running = running - 1 WHERE key = p_key AND running > 0;
    END IF;
END $$;
