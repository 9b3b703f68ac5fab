SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_stat_statements') AS present
