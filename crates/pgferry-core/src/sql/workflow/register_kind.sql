-- A machine's capability flags (1 inbox, 2 children), written when a worker starts.
-- $1 kinds, $2 their flags.
-- Rows are written (and locked) in kind order: workers started together register the same
-- kinds, each in its own order (a worker's machines are a map), and two upserts that lock
-- two kinds' rows in opposite orders deadlock (seen in bench workflow's fan-out phase).
INSERT INTO pgferry.wf_kinds (kind, caps)
SELECT k, c FROM unnest($1::text[], $2::smallint[]) AS t (k, c)
 ORDER BY k
ON CONFLICT (kind) DO UPDATE SET caps = EXCLUDED.caps, updated_at = now()
 WHERE pgferry.wf_kinds.caps IS DISTINCT FROM EXCLUDED.caps
