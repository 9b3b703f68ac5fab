-- New wait events (inputs are distinct); returns the ids of all of them.
INSERT INTO pgferry_ash.wait_event (type, event)
SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (type, event) DO UPDATE SET type = excluded.type
RETURNING id, type, event
