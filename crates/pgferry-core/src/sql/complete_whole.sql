-- complete, whole receipts: a batch the engine found to be whole receipts (all successes
-- without a result, one job segment, each receipt's outcomes contiguous), one element per
-- receipt; pgferry.complete_whole() (sql/functions/complete_whole.sql) records one
-- completion row per receipt, or hands the batch to pgferry.complete() if any is not whole.
-- Answers (0, true) for "all recorded", else one row per outcome.
-- $1 receipt ids, $2 lanes, $3 receipt segments, $4/$5 each receipt's first/last position
-- (1-based), $6 job ids, $7 attempts, $8 job segment, $9 durations ms
SELECT ord, won
  FROM pgferry.complete_whole($1, $2, $3, $4, $5, $6, $7, $8, $9)
