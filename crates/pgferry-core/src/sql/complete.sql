-- complete: every outcome of a batch in one statement (architecture.md §1.5): pgferry.complete()
-- (sql/functions/complete.sql) for the
-- statements and plans per outcome. Batches of whole receipts go to complete_whole.sql.
-- One element per outcome: job id, attempt, job segment, receipt id, lane, receipt segment,
-- outcome code, error, retry delay (ms), result, duration (ms); the last four NULL when no
-- outcome sets them. Names are completion.rs's PerOutcome fields (checked by a unit test).
-- params: $1 ids, $2 attempts, $3 segments, $4 receipts, $5 lanes, $6 rsegs, $7 codes,
--   $8 errors, $9 delays, $10 results, $11 durations
SELECT ord, won
  FROM pgferry.complete($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
