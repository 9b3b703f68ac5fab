-- A sample's locks array as (pid, combo, blocked_by): the array is a run of
-- [pid, combo, n, n blocker pids] groups (blockers that wait for nobody have n = 0).
CREATE OR REPLACE FUNCTION pgferry_ash.decode_locks(locks int[])
RETURNS TABLE (pid int, combo int, blocked_by int[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    i int := 1;
    nb int;
BEGIN
    WHILE i + 2 <= coalesce(array_length(locks, 1), 0) LOOP
        nb := locks[i + 2];
        pid := locks[i];
        combo := locks[i + 1];
        blocked_by := CASE WHEN nb > 0 THEN locks[i + 3 : i + 2 + nb] ELSE '{}'::int[] END;
        RETURN NEXT;
        i := i + 3 + nb;
    END LOOP;
END $$
