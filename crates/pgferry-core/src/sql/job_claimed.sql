-- Has the lane's cursor passed this ready row? Ranges are consumed in order and a new one
-- starts only when the previous is exhausted, so a row is claimed when it was visible at the
-- cursor's range start, or is in the cursor's range at or before its position.
-- Index receipts_cursor (lane, receipt_id DESC): one probe per partition, Limit 1.
-- $1 lane, $2 xid, $3 seq
SELECT pg_visible_in_snapshot($2::text::xid8, rc.lo_snap)
       OR (pg_visible_in_snapshot($2::text::xid8, rc.hi_snap)
           AND (rc.exhausted OR ($2::text::xid8, $3::bigint) <= (rc.last_xid, rc.last_seq)))
  FROM pgferry.receipts rc
 WHERE rc.lane = $1
 ORDER BY rc.receipt_id DESC
 LIMIT 1
