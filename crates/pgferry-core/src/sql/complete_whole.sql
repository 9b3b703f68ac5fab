-- complete, whole receipts: a batch the engine found to be whole receipts (all successes
-- without a result, one job segment, each receipt's outcomes contiguous), one element per
-- receipt; pgferry.complete_whole() (sql/functions/complete_whole.sql) records one
-- completion row per receipt, or hands the batch to pgferry.complete() if any is not whole.
-- Answers (0, true) for "all recorded", else one row per outcome.
-- Per receipt: its id, lane, receipt segment, first and last position (1-based) of its
-- outcomes; per outcome: job id, attempt; the one job segment; durations (ms) or NULL.
-- Names are completion.rs's Runs fields (checked by a unit test).
-- params: $1 receipts, $2 lanes, $3 rsegs, $4 lo, $5 hi, $6 ids, $7 attempts, $8 segment,
--   $9 durations
SELECT ord, won
  FROM pgferry.complete_whole($1, $2, $3, $4, $5, $6, $7, $8, $9)
