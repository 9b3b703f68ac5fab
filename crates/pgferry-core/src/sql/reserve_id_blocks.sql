-- Reserve $1 blocks of job ids: every value of job_id_seq is a multiple of 256 and owns the
-- 256 ids from it (migrations/0001_baseline.sql). Amortised: one call per dozens of enqueue batches.
SELECT nextval('pgferry.job_id_seq') AS base FROM generate_series(1, $1::int)
