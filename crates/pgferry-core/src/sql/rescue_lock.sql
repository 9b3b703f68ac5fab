-- rescue, step 1: take the advisory locks (7267, receipt) of the expired receipts after the
-- mark, in the same key order complete() uses, and name them. Locks are taken after the
-- sort (volatile target-list entries are evaluated above a Sort).
-- Index receipts_id (BRIN over receipt_id) from the mark.
-- $1 rescue mark, $2 max receipts
SELECT coalesce(array_agg(l.receipt_id), '{}') AS ids,
       min(l.receipt_id) AS lo, max(l.receipt_id) AS hi
  FROM (SELECT e.receipt_id, pg_advisory_xact_lock(7267, (e.receipt_id & 2147483647)::int)
          FROM (SELECT rc.receipt_id
                  FROM pgferry.receipts rc
                 WHERE rc.receipt_id > $1 AND rc.lease_until < now()
                 ORDER BY rc.receipt_id
                 LIMIT $2) e
         ORDER BY (e.receipt_id & 2147483647)) l
