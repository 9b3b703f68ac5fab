-- Before a segment's receipts go away, copy forward every lane cursor (newest receipt of a
-- lane) that lives there, without jobs, into the current segment. Runs after
-- carry_cursors_lock.sql in the same transaction, so no claim of those lanes is in flight:
-- an uncommitted newer receipt would otherwise be overtaken by the copy.
-- $1 segment being freed
INSERT INTO pgferry.receipts (segment, lane, lo_snap, hi_snap, hi_tick, last_xid, last_seq,
                              exhausted, job_ids, attempts, job_segments, worker, claimed_at,
                              lease_until)
SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
       r.lane, r.lo_snap, r.hi_snap, r.hi_tick, r.last_xid, r.last_seq, r.exhausted,
       '{}', '{}', '{}', 'pgferry:carry', r.claimed_at, r.lease_until
  FROM pgferry.receipts r
 WHERE r.segment = $1
   AND NOT EXISTS (SELECT 1 FROM pgferry.receipts n
                    WHERE n.lane = r.lane AND n.receipt_id > r.receipt_id)
