-- $1 combos per seeded wait, told apart by a synthetic query id (query_ref).
INSERT INTO pgferry_ash.combo (wait_id, query_ref, database_id, user_id, app_id, backend_id)
SELECT w.id, q, 0, 0, 0, 0
FROM pgferry_ash.wait_event w, generate_series(1, $1::int) q
ON CONFLICT (wait_id, query_ref, database_id, user_id, app_id, backend_id, serving_id)
DO UPDATE SET wait_id = excluded.wait_id
RETURNING id
