-- A sample's locks array as rows (see migrations/0001_ash.sql): groups of
-- [who, combo, n, n blocker pids]; who > 0 is one backend's pid, who = -k is k waiters
-- that block nobody (pid NULL, sessions k). ord keeps groups apart.
CREATE OR REPLACE FUNCTION pgferry_ash.decode_locks(locks int[])
RETURNS TABLE (ord int, pid int, sessions int, combo int, blocked_by int[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    i int := 1;
    nb int;
BEGIN
    ord := 0;
    WHILE i + 2 <= coalesce(array_length(locks, 1), 0) LOOP
        nb := locks[i + 2];
        ord := ord + 1;
        pid := CASE WHEN locks[i] > 0 THEN locks[i] END;
        sessions := CASE WHEN locks[i] > 0 THEN 1 ELSE -locks[i] END;
        combo := locks[i + 1];
        blocked_by := CASE WHEN nb > 0 THEN locks[i + 3 : i + 2 + nb] ELSE '{}'::int[] END;
        RETURN NEXT;
        i := i + 3 + nb;
    END LOOP;
END $$
