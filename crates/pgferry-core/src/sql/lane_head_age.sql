-- Seconds the oldest job at the head of these lanes has waited, by the database clock
-- (sql/functions/lane_head_age.sql); NULL when none waits. $1 lanes of one priority
SELECT extract(epoch FROM pgferry.lane_head_age($1))::float8 AS waited_seconds
