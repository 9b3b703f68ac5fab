-- rescue of heartbeated attempts, step 1: the receipts of expired long leases, locked in
-- the key order complete() uses. Index long_leases_due (lease_until).
-- $1 max receipts
SELECT coalesce(array_agg(l.receipt_id), '{}') AS ids,
       min(l.receipt_id) AS lo, max(l.receipt_id) AS hi
  FROM (SELECT e.receipt_id, pg_advisory_xact_lock(7267, (e.receipt_id & 2147483647)::int)
          FROM (SELECT DISTINCT ll.receipt_id
                  FROM pgferry.long_leases ll
                 WHERE ll.lease_until < now() AND NOT ll.handed_over
                 LIMIT $1) e
         ORDER BY (e.receipt_id & 2147483647)) l
