-- New names (database, user, application, backend type; inputs distinct) and their ids.
INSERT INTO pgferry_ash.label (kind, name)
SELECT k::"char", n FROM unnest($1::text[], $2::text[]) AS u (k, n)
ON CONFLICT (kind, name) DO UPDATE SET name = excluded.name
RETURNING id, kind::text AS kind, name
