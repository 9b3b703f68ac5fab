-- Start an instance (or find the active one with its correlation key): pgferry.wf_start.
-- $1 kind, $2 queue, $3 first step, $4 input, $5 state, $6 correlation key,
-- $7 concurrency key, $8 concurrency limit, $9 rate key, $10 priority, $11 run at,
-- $12 max attempts, $13 concurrency strategy (NULL: the key's).
SELECT id, duplicate
  FROM pgferry.wf_start($1::text, $2::text, $3::text, $4::jsonb, $5::jsonb, $6::text, $7::text,
                        $8::int, $9::text, $10::smallint, $11::timestamptz, $12::int,
                        $13::text)
