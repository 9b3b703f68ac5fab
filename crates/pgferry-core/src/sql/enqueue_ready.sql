-- enqueue of a small batch of jobs due now, with ids assigned by the engine (ids.rs): one
-- INSERT run as an implicit transaction, so its acknowledgement costs one round trip, where a
-- COPY needs two (its start, then its rows and COMMIT). Larger batches use the COPY
-- (enqueue.rs: one WAL record per heap page instead of per row). The columns and their
-- values are the COPY's; `xid` and `enqueued_at` are column defaults.
-- params: $1 segment; arrays in write order: $2 lanes, $3 ids, $4 max_attempts, $5 kinds,
-- $6 args, $7 metas, $8 by_id (the anchor of an id block)
INSERT INTO pgferry.ready (segment, lane, seq, job_id, attempt, max_attempts, kind, args, meta,
                           by_id)
SELECT $1::int2, u.lane, u.id, u.id, 1, u.max_attempts, u.kind, u.args, u.meta, u.by_id
  FROM unnest($2::int4[], $3::int8[], $4::int4[], $5::text[], $6::jsonb[], $7::jsonb[],
              $8::bool[]) AS u(lane, id, max_attempts, kind, args, meta, by_id)
