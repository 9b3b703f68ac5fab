-- One answer of wf_finish's set-based part, as a row: its position in the batch (n), the
-- instance, and the columns of a continued step (NULL when the outcome did not continue).
--
-- wf_finish gathered its answers in ten arrays, one array_agg(... ORDER BY n) each: ten
-- sorts of the batch, each copying every continued step's state and input, then an
-- unnest to hand them back. That was 6.8 µs per outcome against 1.8 µs for one array of
-- these rows in one sort (200 outcomes, docs/performance.md "One array of answers"), in
-- a statement whose whole Postgres cost is 65-75 µs per step. wf_finish.sql keeps the
-- answers in one array of this type; its result columns are unchanged.
--
-- Only wf_finish uses it. Creating a type rewrites nothing.
CREATE TYPE pgferry.wf_finish_answer AS (
    n            bigint,
    id           bigint,
    kind         text,
    step         text,
    state        jsonb,
    input        jsonb,
    attempt      int,
    max_attempts int,
    step_seq     int,
    parent_id    bigint
);
