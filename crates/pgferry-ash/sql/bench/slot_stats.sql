-- Rows, dead tuples and size of one ring slot's partition ($1).
SELECT (SELECT count(*) FROM pgferry_ash.sample WHERE slot = $1::smallint) AS rows,
       coalesce(pg_stat_get_dead_tuples(('pgferry_ash.sample_' || $1::int)::regclass), 0) AS dead,
       pg_total_relation_size(('pgferry_ash.sample_' || $1::int)::regclass) AS bytes
