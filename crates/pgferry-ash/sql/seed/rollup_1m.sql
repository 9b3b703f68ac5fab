-- Synthetic minute rollups over [$1, $2): a sample of data $3 every second.
INSERT INTO pgferry_ash.rollup_1m (minute, combo, seconds)
SELECT m, d.combo, 60.0 * d.n
FROM generate_series($1::timestamptz, $2::timestamptz - interval '1 microsecond',
                     interval '1 minute') m,
     pgferry_ash.decode($3::int[]) d
UNION ALL
SELECT m, 0, 60.0
FROM generate_series($1::timestamptz, $2::timestamptz - interval '1 microsecond',
                     interval '1 minute') m
ON CONFLICT DO NOTHING
