-- Does the segment hold an attempt without an outcome (unclaimed, running, or leased)?
-- Every completion in a segment names one attempt of that segment (complete.sql only
-- records outcomes for attempts found there; the unique index keeps one per attempt), so the
-- segment is closed exactly when both counts are equal. Two counts are linear whatever the
-- statistics say; an anti-join over a freshly sealed segment with stale statistics is not.
-- Leader-only, once per rotation pass. $1 segment
SELECT (SELECT count(*) FROM pgferry.ready WHERE segment = $1)
     > (SELECT count(*) FROM pgferry.completions WHERE segment = $1)
