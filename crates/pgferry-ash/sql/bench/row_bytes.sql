-- Average stored size of the sample rows written since $1 (row header included).
SELECT coalesce(avg(pg_column_size(s.*)), 0)::float8 AS bytes, count(*) AS rows
FROM pgferry_ash.sample s WHERE s.at >= $1::timestamptz
