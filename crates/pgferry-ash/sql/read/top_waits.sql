SELECT wait_type, wait_event, seconds, aas, db_time_pct FROM pgferry_ash.top_waits($1::timestamptz, $2::timestamptz, $3::int)
