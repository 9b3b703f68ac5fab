-- 1-hour rollups older than $1.
DELETE FROM pgferry_ash.rollup_1h WHERE hour < now() - $1::text::interval
