-- Set how many steps of a concurrency key may run at once. $1 key, $2 limit.
INSERT INTO pgferry.wf_keys (key, max) VALUES ($1::text, $2::int)
ON CONFLICT (key) DO UPDATE SET max = EXCLUDED.max
