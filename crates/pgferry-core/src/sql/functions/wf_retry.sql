
-- Runs a failed instance again from the step that failed (attempt 1, state as it was).
-- A correlation key taken meanwhile by another active instance refuses the retry (23505).
-- A retried child is not joined again: its parent already counted the failure.
CREATE OR REPLACE FUNCTION pgferry.wf_retry(p_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v pgferry.wf_instances;
    e record;
BEGIN
    PERFORM pgferry.wf_lock_chain(p_id);
    SELECT * INTO v FROM pgferry.wf_instances WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow instance % not found', p_id USING ERRCODE = 'P0002';
    END IF;
    IF v.status <> 'failed' THEN
        RAISE EXCEPTION 'workflow instance % is %, not failed', p_id, v.status
              USING ERRCODE = '55000';
    END IF;
    IF v.concurrency_key IS NOT NULL THEN
        INSERT INTO pgferry.wf_keys (key, max) VALUES (v.concurrency_key, 1)
        ON CONFLICT (key) DO NOTHING;
    END IF;
    UPDATE pgferry.wf_instances
       SET active = true, status = 'runnable', attempt = 1, error = NULL, finished_at = NULL,
           wake = NULL, updated_at = now()
     WHERE id = p_id;
    e := pgferry.wf_emit(v.id, v.queue, v.priority, v.concurrency_key, v.rate_key, now());
    UPDATE pgferry.wf_instances SET status = e.status, has_slot = e.has_slot WHERE id = p_id;
    RETURN v.step;
END $$;
