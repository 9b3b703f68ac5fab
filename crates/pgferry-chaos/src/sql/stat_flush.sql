-- Table statistics of other sessions reach pg_stat_user_tables within a second while they
-- work; this makes the caller's own view fresh (no cached snapshot).
SELECT pg_stat_clear_snapshot()
