-- Synthetic samples every $3 ms over [$1, $2): data $4, every seventh second $5.
INSERT INTO pgferry_ash.sample (slot, interval_ms, at, data)
SELECT (floor(extract(epoch FROM g) / extract(epoch FROM r.period))::bigint % 3)::smallint,
       $3::int, g,
       CASE WHEN floor(extract(epoch FROM g))::bigint % 7 = 0 THEN $5::int[] ELSE $4::int[] END
FROM pgferry_ash.ring r,
     generate_series($1::timestamptz, $2::timestamptz - interval '1 microsecond',
                     make_interval(secs => $3::int / 1000.0)) g
