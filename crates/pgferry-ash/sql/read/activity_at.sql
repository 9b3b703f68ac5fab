SELECT sample_at, sessions, wait_type, wait_event, query_id, query_text, database, user_name, application, pgferry_role, backend_type, queue, job_kind FROM pgferry_ash.activity_at($1::timestamptz)
