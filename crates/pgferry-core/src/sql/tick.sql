-- tick: record the current snapshot when the log may have changed since the last tick. An
-- unchanged system writes nothing. One NOTIFY per tick wakes other processes.
--
-- "May have changed" is any of:
--  * the ready sequence moved (rows were inserted, committed or not);
--  * a transaction in progress at the last tick (in its xip) has ended;
--  * a transaction that got its xid after the last tick's snapshot (xid >= its xmax: such a
--    transaction is running but NOT listed in xip) has ended. Counted without enumerating:
--    xids in [last.xmax, cur.xmax), minus those still running (in cur's xip), minus the last
--    tick's own transaction — otherwise every tick would cause the next.
--
-- $1 (full): whether the third test applies. A pass right after a tick, when nothing said
-- the log grew since, leaves it out (ticker.rs): the transactions that begin and end in
-- between are then the claims and completions the tick just caused, and counting them made
-- every tick cause the next (docs/performance.md, "Ticks that cause ticks"). A writer that
-- does not tell the ticker still moves the sequence (every path that leaves `seq` to its
-- default) or is caught by the next full pass, at most `idle_tick_interval` later.
-- Plan: the last tick is Limit over Merge Append of ticks_id (one probe per partition).
WITH last AS (
    SELECT t.snap, t.seq_hi, t.own_xid FROM pgferry.ticks t ORDER BY t.tick_id DESC LIMIT 1
),
cur AS (
    SELECT pg_current_snapshot() AS snap, (SELECT last_value FROM pgferry.ready_seq) AS seq_hi
),
due AS (
    SELECT cur.snap, cur.seq_hi
      FROM cur LEFT JOIN last ON true
     WHERE last.snap IS NULL
        OR cur.seq_hi <> last.seq_hi
        OR EXISTS (SELECT 1 FROM pg_snapshot_xip(last.snap) x
                    WHERE pg_visible_in_snapshot(x, cur.snap))
        OR ($1::boolean
            AND (pg_snapshot_xmax(cur.snap)::text::bigint - pg_snapshot_xmax(last.snap)::text::bigint)
                - (SELECT count(*) FROM pg_snapshot_xip(cur.snap) x
                    WHERE x >= pg_snapshot_xmax(last.snap))
                - CASE WHEN last.own_xid >= pg_snapshot_xmax(last.snap)
                        AND pg_visible_in_snapshot(last.own_xid, cur.snap) THEN 1 ELSE 0 END
                > 0)
),
ins AS (
    INSERT INTO pgferry.ticks (segment, tick_id, snap, seq_hi)
    SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
           nextval('pgferry.tick_seq'), due.snap, due.seq_hi
      FROM due
    RETURNING tick_id
)
SELECT tick_id, pg_notify('pgferry_tick', tick_id::text) FROM ins
