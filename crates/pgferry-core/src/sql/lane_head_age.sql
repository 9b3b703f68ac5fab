-- Seconds the oldest job at the head of these lanes has waited, by the database clock
-- (pgferry.lane_head_age, migration 0004); NULL when none waits. $1 lanes of one priority
SELECT extract(epoch FROM pgferry.lane_head_age($1))::float8
