SELECT pg_stat_force_next_flush()
