SELECT cpu, waiting, idle_in_transaction, covered_seconds, window_seconds FROM pgferry_ash.cpu_vs_waiting($1::timestamptz, $2::timestamptz)
