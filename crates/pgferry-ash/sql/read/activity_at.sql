SELECT sample_at, sessions, wait_type, wait_event, query_id, query_text, database, user_name, application, pgferry_role, backend_type FROM pgferry_ash.activity_at($1::timestamptz)
