-- Sessions of the database not idle (a failed run's evidence: a transaction left open, a
-- duty waiting on a lock), oldest transaction first.
SELECT coalesce(application_name, '') AS app, coalesce(state, '') AS state,
       coalesce(wait_event_type, '') AS wait_type, coalesce(wait_event, '') AS wait,
       coalesce(extract(epoch FROM now() - xact_start), 0)::float8 AS xact_s,
       left(query, 160) AS query
  FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'
 ORDER BY xact_start NULLS LAST
