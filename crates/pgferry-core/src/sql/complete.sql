-- complete: every outcome of a batch in one statement (architecture.md §1.5): pgferry.complete()
-- (sql/functions/complete.sql) for the
-- statements and plans per outcome. Batches of whole receipts go to complete_whole.sql.
-- $1 job ids, $2 attempts, $3 job segments, $4 receipt ids, $5 lanes, $6 receipt segments,
-- $7 outcome codes, $8 errors, $9 retry delays ms, $10 results, $11 durations ms
SELECT ord, won
  FROM pgferry.complete($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
