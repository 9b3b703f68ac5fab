-- The sampler's session: a sample lost in a crash (the last ~0.6 s of WAL) costs nothing
-- worth a WAL flush per second; without this each sample waited for its commit's fsync
-- (measured ~10 ms of an 11 ms sample on the bench cluster).
SET synchronous_commit = off
