SELECT key, seconds, aas, db_time_pct FROM pgferry_ash.aas_by($1::text, $2::timestamptz, $3::timestamptz, $4::text)
