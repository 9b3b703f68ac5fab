-- Does the segment hold an attempt without an outcome (unclaimed, running, or leased)?
-- Every attempt counted in a segment's completions is one attempt of that segment
-- (pgferry.complete() and the rescuer only record outcomes for attempts their receipt holds,
-- once each under the receipt's lock), so the segment is closed exactly when both counts are
-- equal. Two aggregates are linear whatever the statistics say; an anti-join over a freshly
-- sealed segment with stale statistics is not. Leader-only, once per rotation pass.
-- Attempts handed over to long_leases (ADR 0008) count as closed for their segment: their
-- outcome is recorded there, never in completions (index long_leases_handed_seg).
-- $1 segment
SELECT (SELECT count(*) FROM pgferry.ready WHERE segment = $1)
     > (SELECT coalesce(sum(cardinality(job_ids)), 0) FROM pgferry.completions WHERE segment = $1)
       + (SELECT count(*) FROM pgferry.long_leases WHERE handed_seg = $1) AS has_open_jobs
