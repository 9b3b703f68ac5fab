-- Take the claim lock (the same advisory key pgferry.claim try-locks) of every lane with a
-- receipt in the segment, in lane order. Claimers only ever try-lock, so this cannot
-- deadlock; they skip these lanes for the few milliseconds it is held.
-- $1 segment being freed
SELECT count(pg_advisory_xact_lock(7266, l.lane))
  FROM (SELECT DISTINCT lane FROM pgferry.receipts WHERE segment = $1 ORDER BY lane) l
