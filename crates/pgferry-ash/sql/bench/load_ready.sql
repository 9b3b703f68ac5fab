-- Simulated backends that are busy (not idle) right now.
SELECT count(*) AS busy FROM pg_stat_activity
WHERE application_name = 'ash-bench-load' AND state <> 'idle'
