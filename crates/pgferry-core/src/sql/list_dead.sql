-- list_jobs with state = dead: a queue's dead-lettered jobs, newest job first, from the
-- dead-letter table itself (index dead_lane (lane, job_id) backwards per lane). A job is
-- dead exactly when it has a row here (get_job: a dead outcome without one is purged, i.e.
-- gone), so this reads one row per answer instead of walking every claimed attempt of the
-- queue's history for the few that died. At most n = max($5, $3 / lanes) rows per lane; the
-- mark works as in list_pending.sql.
-- $1 queue, $2 cursor job id (NULL: from the newest), $3 rows to read, $4 kind (NULL: any),
-- $5 answers wanted, $6 enqueued since (NULL: any), $7 text in args or meta (lower case;
-- NULL: any), $8 text in the last error (lower case; NULL: any)
WITH lanes AS MATERIALIZED (
    SELECT l.lane
      FROM pgferry.queues q JOIN pgferry.lanes l ON l.queue_id = q.queue_id
     WHERE q.name = $1
),
lim AS (
    SELECT greatest($5::bigint, $3::bigint / greatest(count(*), 1)) AS n FROM lanes
),
cand AS MATERIALIZED (
    SELECT l.lane, d.*
      FROM lanes l
      CROSS JOIN LATERAL (
          SELECT d.job_id, d.kind, d.enqueued_at,
                 ($7::text IS NULL OR (strpos(lower(d.args::text), $7) > 0 OR strpos(lower(coalesce(d.meta::text, '')), $7) > 0))
                 AND ($8::text IS NULL OR strpos(lower(coalesce(d.error, '')), $8) > 0) AS text_ok
            FROM pgferry.dead d
           WHERE d.lane = l.lane AND ($2::bigint IS NULL OR d.job_id < $2)
             -- The same bound as an index condition (a generic plan cannot use the OR):
             -- a page deep in the lane starts at the cursor, not at the newest row.
             AND d.job_id <= coalesce($2::bigint, 9223372036854775807)
           ORDER BY d.job_id DESC
           LIMIT (SELECT lim.n FROM lim)) d
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
(SELECT false AS is_mark, c.job_id, 'dead' AS state
   FROM cand c
  WHERE NOT EXISTS (SELECT 1 FROM mark m WHERE c.job_id < m.job_id)
    AND ($4::text IS NULL OR c.kind = $4)
    AND c.text_ok
    -- Rows written before migration 0016 have no enqueue time: the job's oldest log row.
    AND ($6::timestamptz IS NULL
         OR coalesce(c.enqueued_at,
                     (SELECT min(r0.enqueued_at) FROM pgferry.ready_rows(c.job_id) r0)) >= $6)
  ORDER BY c.job_id DESC
  LIMIT $5)
UNION ALL
SELECT true, m.job_id, NULL FROM mark m
