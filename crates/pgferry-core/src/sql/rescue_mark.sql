-- Advance the rescue mark over receipts that are expired (so rescue has examined them) and
-- old enough that no claim holding a lower receipt id can still be committing (claims are
-- single short statements; $2 is far longer than any). Index receipts_id from the old mark.
-- $1 highest receipt id the last rescue pass examined, $2 settle interval ms
UPDATE pgferry.leader_state
   SET rescue_mark = greatest(rescue_mark, least(
         $1::bigint,
         coalesce((SELECT min(r.receipt_id) - 1 FROM pgferry.receipts r
                    WHERE r.receipt_id > rescue_mark
                      AND (r.lease_until >= now()
                           OR r.claimed_at >= now() - $2::bigint * interval '1 millisecond')),
                  (SELECT max(r.receipt_id) FROM pgferry.receipts r
                    WHERE r.receipt_id > rescue_mark),
                  rescue_mark)))
RETURNING rescue_mark
