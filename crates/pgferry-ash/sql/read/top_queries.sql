SELECT query_id, query_text, seconds, aas, db_time_pct, top_wait FROM pgferry_ash.top_queries($1::timestamptz, $2::timestamptz, $3::int)
