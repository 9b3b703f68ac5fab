-- nudge_ticker: a process that is not the leader appended to the log while the ticker may be
-- idle; the leader's listener wakes its ticker (growth.rs). Sent outside the enqueue's own
-- transaction, at most once per couple of milliseconds per process.
SELECT pg_notify('pgferry_grew', '')
