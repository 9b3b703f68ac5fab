-- rescue of heartbeated attempts, step 3: forget the expired long leases just handled (the
-- attempts are closed now, by their worker or by step 2). Primary key / long_leases_due.
-- $1 receipt ids locked in step 1
DELETE FROM pgferry.long_leases WHERE lease_until < now() AND receipt_id = ANY ($1)
   AND NOT handed_over
