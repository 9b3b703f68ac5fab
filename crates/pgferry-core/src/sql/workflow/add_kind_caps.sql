-- Capability flags declared by remote workers (1 inbox, 2 children): only ever added, never
-- cleared, because kinds are names shared by every tenant and one tenant's worker must not
-- take away what another's steps load. $1 kinds, $2 their flags.
-- A kind named twice in one request gets the union of its flags (one row per kind: ON CONFLICT
-- cannot update a row twice in one statement). Rows are written (and locked) in kind order,
-- as register_kind.sql does, so that concurrent registrations cannot deadlock.
INSERT INTO pgferry.wf_kinds (kind, caps)
SELECT k, bit_or(c) FROM unnest($1::text[], $2::smallint[]) AS t (k, c) GROUP BY k
 ORDER BY k
ON CONFLICT (kind) DO UPDATE SET caps = pgferry.wf_kinds.caps | EXCLUDED.caps, updated_at = now()
 WHERE pgferry.wf_kinds.caps | EXCLUDED.caps <> pgferry.wf_kinds.caps
