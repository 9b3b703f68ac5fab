-- New (role, queue, kind) of pgferry's backends (inputs distinct) and their ids.
INSERT INTO pgferry_ash.serving (role, queue, kind)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
ON CONFLICT (role, queue, kind) DO UPDATE SET role = excluded.role
RETURNING id, role, queue, kind
