SELECT count(pg_terminate_backend(pid)) AS stopped FROM pg_stat_activity
WHERE application_name = 'ash-bench-load'
