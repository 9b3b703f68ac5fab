
-- Takes one token of a rate limit's bucket; returns when the step may run. A bucket may go
-- negative: the step is then delayed until its token exists (now + deficit / rate), so a
-- limited step waits in wf_ready without being claimed and re-claimed. No bucket, no limit.
CREATE OR REPLACE FUNCTION pgferry.wf_take_token(p_key text) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_tokens float8;
    v_rate   float8;
BEGIN
    IF p_key IS NULL THEN
        RETURN now();
    END IF;
    UPDATE pgferry.wf_buckets b
       SET tokens = least(b.burst, b.tokens + extract(epoch FROM now() - b.at) * b.rate) - 1,
           at = now()
     WHERE b.key = p_key
    RETURNING b.tokens, b.rate INTO v_tokens, v_rate;
    IF NOT FOUND OR v_tokens >= 0 THEN
        RETURN now();
    END IF;
    RETURN now() + make_interval(secs => -v_tokens / v_rate);
END $$;
