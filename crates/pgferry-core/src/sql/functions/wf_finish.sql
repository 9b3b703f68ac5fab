
-- Applies a batch of step outcomes in one statement (wf_apply each, in the given order; the
-- engine orders a batch by concurrency key, then parent, then instance, so that batches
-- take their locks in one order). Returns per outcome whether it was applied or stale.
CREATE OR REPLACE FUNCTION pgferry.wf_finish(p_outcomes jsonb)
RETURNS TABLE (id bigint, applied boolean)
LANGUAGE plpgsql AS $$
DECLARE
    o jsonb;
BEGIN
    FOR o IN SELECT * FROM jsonb_array_elements(p_outcomes) LOOP
        id := (o->>'id')::bigint;
        applied := pgferry.wf_apply(o);
        RETURN NEXT;
    END LOOP;
END $$;
