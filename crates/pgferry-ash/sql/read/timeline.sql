SELECT bucket_start, wait_type, aas, coverage FROM pgferry_ash.timeline($1::timestamptz, $2::timestamptz, make_interval(secs => $3::float8))
