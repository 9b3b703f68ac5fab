-- list_jobs, phase "scheduled": a queue's jobs waiting in `scheduled` (first runs, delayed
-- retries, snoozes), newest job first. Index scheduled_lane (lane, job_id) backwards per
-- lane, at most n = max($5, $3 / lanes) rows per lane; the mark works as in list_pending.sql.
-- A first run (first_run, migration 0025) has no row in the log: its row here is the whole
-- job, so it comes back whole (kind, args, meta, times, priority, its unique key, whether a
-- cancel is recorded) and the listing does not read it again through jobs_detail.sql. The
-- other rows (retries, snoozes: earlier attempts in the log) come back as ids only.
-- $1 queue, $2 cursor job id (NULL: from the newest), $3 rows to read, $4 kind (NULL: any),
-- $5 answers wanted, $6 text in args or meta (lower case; NULL: any)
WITH lanes AS MATERIALIZED (
    SELECT l.lane, l.priority
      FROM pgferry.queues q JOIN pgferry.lanes l ON l.queue_id = q.queue_id
     WHERE q.name = $1
),
lim AS (
    SELECT greatest($5::bigint, $3::bigint / greatest(count(*), 1)) AS n FROM lanes
),
cand AS MATERIALIZED (
    SELECT l.lane, l.priority, s.*
      FROM lanes l
      CROSS JOIN LATERAL (
          SELECT s.job_id, s.kind, s.first_run, s.args, s.meta, s.max_attempts, s.run_at,
                 s.enqueued_at,
                 ($6::text IS NULL OR (strpos(lower(s.args::text), $6) > 0 OR strpos(lower(coalesce(s.meta::text, '')), $6) > 0)) AS text_ok
            FROM pgferry.scheduled s
           WHERE s.lane = l.lane AND ($2::bigint IS NULL OR s.job_id < $2)
             -- The same bound as an index condition (a generic plan cannot use the OR):
             -- a page deep in the lane starts at the cursor, not at the newest row.
             AND s.job_id <= coalesce($2::bigint, 9223372036854775807)
           ORDER BY s.job_id DESC
           LIMIT (SELECT lim.n FROM lim)) s
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
(SELECT false AS is_mark, p.job_id, 'scheduled' AS state, p.first_run, p.kind,
        CASE WHEN p.first_run THEN p.args END AS args,
        CASE WHEN p.first_run THEN p.meta END AS meta, p.max_attempts, p.run_at,
        p.enqueued_at, p.priority, u.key AS unique_key,
        p.first_run AND EXISTS (SELECT 1 FROM pgferry.cancels x WHERE x.job_id = p.job_id)
            AS cancel_requested
   FROM (SELECT c.*
           FROM cand c
          WHERE NOT EXISTS (SELECT 1 FROM mark m WHERE c.job_id < m.job_id)
            AND ($4::text IS NULL OR c.kind = $4)
            AND c.text_ok
          ORDER BY c.job_id DESC
          LIMIT $5) p
   -- The unique key a first run holds (index unique_keys_job), as jobs_detail.sql reads it.
   LEFT JOIN LATERAL (
       SELECT u.key FROM pgferry.unique_keys u
        WHERE p.first_run AND u.job_id = p.job_id LIMIT 1) u ON true
  ORDER BY p.job_id DESC)
UNION ALL
SELECT true, m.job_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM mark m
