-- heartbeat: extend the leases of held attempts; see pgferry.heartbeat() in
-- sql/functions/heartbeat.sql. Per attempt: job id, attempt, job segment, receipt id, lane,
-- receipt segment; then the lease (ms) and the worker. Names are control.rs's
-- HeartbeatParams fields (checked by a unit test).
-- params: $1 ids, $2 attempts, $3 segments, $4 receipts, $5 lanes, $6 rsegs, $7 lease_ms,
--   $8 worker
SELECT ord, held, cancelled, lease_until
  FROM pgferry.heartbeat($1, $2, $3, $4, $5, $6, $7, $8)
