-- list_jobs, last phase: jobs cancelled while their first run waited in `scheduled` — they
-- never reached the log, and their `cancels` row is all that is left of them. Newest first;
-- partial index cancels_unscheduled (lane, job_id) backwards per lane, at most n = max($5, $3 / lanes) rows
-- per lane; the mark works as in list_pending.sql. (A later attempt cancelled in `scheduled` is
-- answered by the claimed phase, at its earlier attempt.)
-- $1 queue, $2 cursor job id (NULL: from the newest), $3 rows to read, $4 kind (NULL: any),
-- $5 answers wanted, $6 text in args or meta (lower case; NULL: any)
WITH lanes AS MATERIALIZED (
    SELECT l.lane
      FROM pgferry.queues q JOIN pgferry.lanes l ON l.queue_id = q.queue_id
     WHERE q.name = $1
),
lim AS (
    SELECT greatest($5::bigint, $3::bigint / greatest(count(*), 1)) AS n FROM lanes
),
cand AS MATERIALIZED (
    SELECT l.lane, x.*
      FROM lanes l
      CROSS JOIN LATERAL (
          SELECT x.job_id, x.kind,
                 ($6::text IS NULL OR (strpos(lower(x.args::text), $6) > 0 OR strpos(lower(coalesce(x.meta::text, '')), $6) > 0)) AS text_ok,
                 x.attempt
            FROM pgferry.cancels x
           WHERE x.lane = l.lane AND ($2::bigint IS NULL OR x.job_id < $2)
             -- The same bound as an index condition (a generic plan cannot use the OR):
             -- a page deep in the lane starts at the cursor, not at the newest row.
             AND x.job_id <= coalesce($2::bigint, 9223372036854775807)
           ORDER BY x.job_id DESC
           LIMIT (SELECT lim.n FROM lim)) x
),
mark AS (
    SELECT m.job_id
      FROM (SELECT DISTINCT ON (c.lane) c.job_id, count(*) OVER (PARTITION BY c.lane) AS n
              FROM cand c
             ORDER BY c.lane, c.job_id) m
     WHERE m.n >= (SELECT lim.n FROM lim)
     ORDER BY m.job_id DESC
     LIMIT 1
)
(SELECT false AS is_mark, c.job_id, 'cancelled' AS state
   FROM cand c
  WHERE NOT EXISTS (SELECT 1 FROM mark m WHERE c.job_id < m.job_id)
    AND c.attempt = 1
    AND ($4::text IS NULL OR c.kind = $4)
    AND c.text_ok
  ORDER BY c.job_id DESC
  LIMIT $5)
UNION ALL
SELECT true, m.job_id, NULL FROM mark m
