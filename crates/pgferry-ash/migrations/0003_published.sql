-- Attribution across servers (issue 23): every pgferry server publishes what its pooled
-- backends serve — (pid, role, queue, kind) and since when — so that the one sampler (the
-- leader's, or pg_cron's) can attribute the backends of every server, not only its own.
-- One row per server, overwritten at most once per sampling tick by that server and never
-- on a job's path. UNLOGGED: it is a live view, worth nothing after a crash, and it writes no
-- WAL; a server gone without deleting its row is pruned once the row is older than the
-- sampler's TTL.
CREATE UNLOGGED TABLE pgferry_ash.published (
    -- The publishing process (host-independent: its pid and start time).
    server text PRIMARY KEY,
    -- When the server took its snapshot, on the database's clock (made conservative by the
    -- publish round trip): an entry vouches only for statements that began before it.
    at     timestamptz NOT NULL,
    pids   int[] NOT NULL,
    -- When each operation began (database clock, minus the round trip): the statement a
    -- backend runs belongs to the operation only if it began at or after this.
    since  timestamptz[] NOT NULL,
    roles  text[] NOT NULL,
    queues text[] NOT NULL,
    kinds  text[] NOT NULL
) WITH (fillfactor = 50);

-- activity_ids() gains a serving_id column (a new return type).
DROP FUNCTION IF EXISTS pgferry_ash.activity_ids(jsonb);
