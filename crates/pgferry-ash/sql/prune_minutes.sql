-- 1-minute rollups older than $1 (the hour rollups keep their history).
DELETE FROM pgferry_ash.rollup_1m WHERE minute < now() - $1::text::interval
