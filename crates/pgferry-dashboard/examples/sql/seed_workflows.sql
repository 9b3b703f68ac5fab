-- Bench seeding (examples/list_timings.rs): $3 workflow instances of engine queue $1
-- started through pgferry.wf_start (the engine's own start), numbered from $2; kinds
-- kind0..kind9; correlation key "order-<n>". Returns how many were started.
SELECT count(*) AS started
  FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) AS n,
       LATERAL pgferry.wf_start('kind' || (n % 10), $1::text, 'start',
                                jsonb_build_object('n', n), NULL, 'order-' || n, NULL, NULL,
                                NULL, NULL::smallint, NULL, NULL) AS s
