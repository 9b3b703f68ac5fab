INSERT INTO pgferry_ash.wait_event (type, event)
SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT DO NOTHING
