
-- Cancels an instance and, with it, its descendants: no step of any of them runs after this
-- commits (their picker rows and waiter places go in the same statement; a running step's
-- outcome is stale). Workers are told on the pgferry_wf_cancel channel. Returns the status
-- the instance had (a terminal status: nothing changed).
CREATE OR REPLACE FUNCTION pgferry.wf_cancel(p_id bigint, p_reason text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v pgferry.wf_instances;
BEGIN
    PERFORM pgferry.wf_lock_chain(p_id);
    SELECT * INTO v FROM pgferry.wf_instances WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow instance % not found', p_id USING ERRCODE = 'P0002';
    END IF;
    IF NOT v.active THEN
        RETURN v.status;
    END IF;
    INSERT INTO pgferry.wf_steps (instance_id, step_seq, step, attempt, outcome, error, worker,
                                  started_at)
    VALUES (v.id, v.step_seq, v.step, v.attempt, 'cancelled', p_reason, NULL, NULL);
    PERFORM pgferry.wf_end(p_id, 'cancelled', NULL, coalesce(p_reason, 'cancelled'));
    PERFORM pg_notify('pgferry_wf_cancel', p_id::text);
    RETURN v.status;
END $$;
