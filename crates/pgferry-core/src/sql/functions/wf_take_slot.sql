
-- Takes a slot of a concurrency key if one is free.
CREATE OR REPLACE FUNCTION pgferry.wf_take_slot(p_key text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgferry.wf_keys SET running = running + 1 WHERE key = p_key AND running < max;
    RETURN FOUND;
END $$;
