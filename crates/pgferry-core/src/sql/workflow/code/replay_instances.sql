-- A page of a kind's instances for `pgferry workflow replay`, newest first: $1 kind,
-- $2 ids below this, $3 page size. An offline check, so it walks the primary key and
-- filters by kind (no index of its own on the hot table).
SELECT id, status, input, state
  FROM pgferry.wf_instances
 WHERE kind = $1::text AND id < $2::bigint
 ORDER BY id DESC
 LIMIT $3::int
