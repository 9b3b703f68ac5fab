-- What other servers published for these sampled backends (pgferry_ash.published_serving).
-- $1 pids, $2 their statements' start (epoch seconds), $3 this server (its own backends are
-- attributed from memory).
SELECT pid, role, queue, kind FROM pgferry_ash.published_serving($1::int[], $2::float8[], $3::text)
