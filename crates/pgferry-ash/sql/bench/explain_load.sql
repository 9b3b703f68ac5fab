-- The plan every window reader is built on: load per combo over [$1, $2).
EXPLAIN (ANALYZE, BUFFERS)
SELECT x.combo, sum(x.seconds) FROM pgferry_ash.load_at($1::timestamptz, $2::timestamptz) x
GROUP BY x.combo
