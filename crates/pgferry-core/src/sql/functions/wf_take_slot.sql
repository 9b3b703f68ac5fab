
-- Takes a slot of a concurrency key if one is free. With p_rep (an emission due now), a
-- round_robin key gives a slot only while it has no representative in the picker, and
-- p_rep becomes it: the key keeps one step in the picker, its others wait their turn among
-- its waiters (migration 0019). Without p_rep (a step that came due by time, taken by the
-- claim) any free slot is taken.
CREATE OR REPLACE FUNCTION pgferry.wf_take_slot(p_key text, p_rep bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgferry.wf_keys
       SET running = running + 1,
           rep = CASE WHEN strategy = 'round_robin' AND p_rep IS NOT NULL THEN p_rep ELSE rep END
     WHERE key = p_key AND running < max
       AND (p_rep IS NULL OR strategy <> 'round_robin' OR rep IS NULL);
    RETURN FOUND;
END $$;
