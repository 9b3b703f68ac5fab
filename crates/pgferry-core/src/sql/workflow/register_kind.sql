-- A machine's capability flags (1 inbox, 2 children), written when a worker starts.
-- $1 kinds, $2 their flags.
INSERT INTO pgferry.wf_kinds (kind, caps)
SELECT k, c FROM unnest($1::text[], $2::smallint[]) AS t (k, c)
ON CONFLICT (kind) DO UPDATE SET caps = EXCLUDED.caps, updated_at = now()
 WHERE pgferry.wf_kinds.caps IS DISTINCT FROM EXCLUDED.caps
