-- A server's snapshot of what its pooled backends serve (migrations/0003_published.sql).
-- Instants come already on the database's clock (epoch seconds), mapped by the publisher
-- through a lower bound of the clock offset (src/publish.rs), so `at` is never later than
-- the snapshot and no `since` later than its operation's start. The database's clock comes
-- back for the next mapping.
-- $1 server, $2 at, $3 pids, $4 since of each, $5 roles, $6 queues, $7 kinds.
INSERT INTO pgferry_ash.published AS p (server, at, pids, since, roles, queues, kinds)
VALUES ($1::text, to_timestamp($2::float8), $3::int[],
        ARRAY(SELECT to_timestamp(u.s)
              FROM unnest($4::float8[]) WITH ORDINALITY AS u (s, o) ORDER BY u.o),
        $5::text[], $6::text[], $7::text[])
ON CONFLICT (server) DO UPDATE
SET at = excluded.at, pids = excluded.pids, since = excluded.since, roles = excluded.roles,
    queues = excluded.queues, kinds = excluded.kinds
RETURNING extract(epoch FROM clock_timestamp())::float8 AS db_now
