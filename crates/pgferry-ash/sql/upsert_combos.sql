-- New combos (distinct inputs) and their ids.
INSERT INTO pgferry_ash.combo (wait_id, query_ref, database_id, user_id, app_id, backend_id,
                               serving_id)
SELECT * FROM unnest($1::int[], $2::int[], $3::int[], $4::int[], $5::int[], $6::int[],
                     $7::int[])
ON CONFLICT (wait_id, query_ref, database_id, user_id, app_id, backend_id, serving_id)
DO UPDATE SET wait_id = excluded.wait_id
RETURNING id, wait_id, query_ref, database_id, user_id, app_id, backend_id, serving_id
