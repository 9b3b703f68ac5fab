UPDATE pgferry_ash.rollup_state SET minute_to = $1::timestamptz, hour_to = $2::timestamptz
