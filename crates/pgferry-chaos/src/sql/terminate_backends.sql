-- Every backend of a pgferry process on this database (application_name pgferry-<role>),
-- never the suite's own sessions (chaos-*).
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::bigint AS terminated
  FROM pg_stat_activity
 WHERE datname = current_database()
   AND application_name LIKE 'pgferry-%'
   AND pid <> pg_backend_pid()
