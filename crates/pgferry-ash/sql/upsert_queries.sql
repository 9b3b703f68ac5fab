-- New query ids with their text at first sight (kept: later text never replaces it, but
-- a first sight without text is filled in when text turns up).
INSERT INTO pgferry_ash.query (query_id, text)
SELECT * FROM unnest($1::bigint[], $2::text[])
ON CONFLICT (query_id) DO UPDATE SET text = coalesce(query.text, excluded.text)
RETURNING id, query_id
