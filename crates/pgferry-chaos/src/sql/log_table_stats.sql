-- Cumulative statistics of the append-only log tables (every partition of ready, receipts
-- and completions): dead tuples, updates and deletes (the hot path must make none), and
-- tuples read from ready (what claims cost).
SELECT coalesce(sum(n_dead_tup), 0)::bigint AS dead,
       coalesce(sum(n_tup_upd + n_tup_del), 0)::bigint AS upd_del,
       coalesce(sum(coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0))
                FILTER (WHERE relname LIKE 'ready\_%'), 0)::bigint AS ready_read
  FROM pg_stat_user_tables
 WHERE schemaname = 'pgferry'
   AND (relname LIKE 'ready\_%' OR relname LIKE 'receipts\_%' OR relname LIKE 'completions\_%')
