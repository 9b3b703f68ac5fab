-- heartbeat: extend the leases of held attempts; see pgferry.heartbeat() in
-- sql/functions/heartbeat.sql. $1 job ids, $2 attempts, $3 job segments, $4 receipt
-- ids, $5 lanes, $6 receipt segments, $7 lease ms, $8 worker
SELECT ord, held, cancelled, lease_until
  FROM pgferry.heartbeat($1, $2, $3, $4, $5, $6, $7, $8)
