-- One lock for every component's migrations: two servers starting at once apply each step
-- exactly once; the second waits and then finds nothing to do.
-- ("pgferry\x01" in ASCII as a bigint.)
SELECT pg_advisory_lock(8099555040746961153)
