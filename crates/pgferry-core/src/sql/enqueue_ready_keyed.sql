-- enqueue_ready.sql for requests with idempotency keys: the jobs and their requests' key
-- records in one INSERT … INSERT statement, run as an implicit transaction (one round trip,
-- where the COPY with its key records needs two). A key that exists already raises
-- unique_violation and the whole statement — the jobs with it — is rolled back, as the COPY
-- path's pipelined COMMIT is (idempotency_record.sql).
-- params: $1 segment; job arrays in write order: $2 lanes, $3 ids, $4 max_attempts, $5 kinds,
-- $6 args, $7 metas, $8 by_id; key records: $9 keys, $10 fingerprints, $11 the flush's ids in
-- request order, $12 each key's first position among them, $13 its request's length
WITH jobs AS (
    INSERT INTO pgferry.ready (segment, lane, seq, job_id, attempt, max_attempts, kind, args,
                               meta, by_id)
    SELECT $1::int2, u.lane, u.id, u.id, 1, u.max_attempts, u.kind, u.args, u.meta, u.by_id
      FROM unnest($2::int4[], $3::int8[], $4::int4[], $5::text[], $6::jsonb[], $7::jsonb[],
                  $8::bool[]) AS u(lane, id, max_attempts, kind, args, meta, by_id)
)
INSERT INTO pgferry.idempotency_keys (key, fingerprint, job_ids)
SELECT k.key, k.fingerprint, ($11::bigint[])[k.first : k.first + k.n - 1]
  FROM unnest($9::text[], $10::bytea[], $12::int[], $13::int[]) AS k (key, fingerprint, first, n)
