-- Blocking chains at a moment, from the last sample at or before it (no older than a
-- minute): one row per backend that blocks others (pid set) and one per group of
-- waiters that block nobody (pid NULL, sessions = how many), with the pids they waited
-- for, the depth (0: a root, which blocks others and waits for nobody; NULL: a cycle, a
-- deadlock not yet broken) and what they were doing.
CREATE OR REPLACE FUNCTION pgferry_ash.blocking_at(moment timestamptz)
RETURNS TABLE (sample_at timestamptz, pid int, sessions int, blocked_by int[], depth int,
               root_pid int, wait_type text, wait_event text, query_id bigint,
               application text, pgferry_role text)
LANGUAGE sql STABLE
-- Row estimates through the nested set-returning functions are far too high, and JIT
-- then costs a second per call (measured: 1.37 s, 1 ms without).
SET jit = off
AS $$
    WITH RECURSIVE s AS (
        SELECT x.at, x.locks
        FROM pgferry_ash.sample x
        WHERE x.at <= moment AND x.at > moment - interval '1 minute'
        ORDER BY x.at DESC
        LIMIT 1
    ), e AS (
        SELECT d.* FROM s, pgferry_ash.decode_locks(s.locks) d
    ), chain AS (
        SELECT e.ord, e.pid, 0 AS depth, e.pid AS root
        FROM e
        WHERE e.blocked_by = '{}'
        UNION ALL
        SELECT e.ord, e.pid, chain.depth + 1, chain.root
        FROM chain
        JOIN e ON chain.pid = ANY (e.blocked_by)
        WHERE chain.depth < 64
    ), best AS (
        SELECT DISTINCT ON (chain.ord) chain.ord, chain.depth, chain.root
        FROM chain
        ORDER BY chain.ord, chain.depth DESC
    )
    SELECT s.at, e.pid, e.sessions, e.blocked_by, best.depth, best.root, n.wait_type,
           n.wait_event, n.query_id, n.application, n.pgferry_role
    FROM s, e
    LEFT JOIN best ON best.ord = e.ord
    LEFT JOIN pgferry_ash.combo_named n ON n.combo = e.combo
    ORDER BY best.root, best.depth, e.pid, e.ord
$$
