-- Janitor: drop finished handed-over attempts (ADR 0008) once their history is past the
-- retention (the longest of the leader's, $1 ms, and the queues'), their segment was freed
-- and their receipt is gone too (until then complete() must still find the row to answer a
-- late report stale). Index long_leases_handed; receipts_cursor (lane, receipt_id) probe.
-- $1 retention ms, $2 batch size
WITH gone AS (
    DELETE FROM pgferry.long_leases ll
     WHERE (ll.job_id, ll.attempt) IN (
               SELECT x.job_id, x.attempt
                 FROM pgferry.long_leases x
                WHERE x.handed_over AND x.outcome IS NOT NULL AND x.handed_seg IS NULL
                  AND x.finished_at < now() - greatest(
                          $1::bigint,
                          (SELECT coalesce(max(q.retention_ms), 0) FROM pgferry.queues q))
                      * interval '1 millisecond'
                  AND NOT EXISTS (SELECT 1 FROM pgferry.receipts rc
                                   WHERE rc.lane = x.lane AND rc.receipt_id = x.receipt_id)
                  -- Nor while it holds a unique key for a period: once the log rows are gone
                  -- this row is the completion that unique.rs and unique_prune.sql read
                  -- (index unique_keys_job).
                  AND NOT EXISTS (SELECT 1 FROM pgferry.unique_keys k
                                   WHERE k.job_id = x.job_id
                                     AND x.finished_at + k.period_ms * interval '1 millisecond'
                                         > now())
                LIMIT $2)
    RETURNING 1
)
SELECT count(*) AS dropped FROM gone
