-- Records the idempotency keys of the requests a flush wrote, inside the flush's transaction:
-- one row per request, its job ids sliced from the flush's ids ($3, in flush order) by each
-- request's first position and length ($4, $5). A plain INSERT on purpose: a key that exists
-- already raises unique_violation, which aborts the transaction, so the COMMIT pipelined
-- behind it rolls the flush back instead of writing the request's jobs a second time.
-- Names are enqueue.rs's RecordParams fields (checked by a unit test).
-- params: $1 keys, $2 fingerprints, $3 ids, $4 firsts, $5 lens
INSERT INTO pgferry.idempotency_keys (key, fingerprint, job_ids)
SELECT k.key, k.fingerprint, ($3::bigint[])[k.first : k.first + k.n - 1]
  FROM unnest($1::text[], $2::bytea[], $4::int[], $5::int[]) AS k (key, fingerprint, first, n)
