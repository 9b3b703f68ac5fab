-- Create or change a rate limit's token bucket. $1 key, $2 tokens per second, $3 burst.
-- A new bucket starts full.
INSERT INTO pgferry.wf_buckets (key, rate, burst, tokens) VALUES ($1::text, $2::float8, $3::float8, $3::float8)
ON CONFLICT (key) DO UPDATE SET rate = EXCLUDED.rate, burst = EXCLUDED.burst
