-- Snapshots of servers that stopped publishing (killed, or idle) past the TTL. $1 seconds.
DELETE FROM pgferry_ash.published WHERE at < now() - make_interval(secs => $1::float8)
