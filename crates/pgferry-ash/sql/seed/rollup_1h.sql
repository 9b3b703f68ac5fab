-- Synthetic hour rollups over [$1, $2): a sample of data $3 every second.
INSERT INTO pgferry_ash.rollup_1h (hour, combo, seconds)
SELECT h, d.combo, 3600.0 * d.n
FROM generate_series($1::timestamptz, $2::timestamptz - interval '1 microsecond',
                     interval '1 hour') h,
     pgferry_ash.decode($3::int[]) d
UNION ALL
SELECT h, 0, 3600.0
FROM generate_series($1::timestamptz, $2::timestamptz - interval '1 microsecond',
                     interval '1 hour') h
ON CONFLICT DO NOTHING
