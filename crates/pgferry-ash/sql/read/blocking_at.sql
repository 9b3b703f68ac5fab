SELECT sample_at, pid, sessions, blocked_by, depth, root_pid, wait_type, wait_event, query_id, application, pgferry_role FROM pgferry_ash.blocking_at($1::timestamptz)
