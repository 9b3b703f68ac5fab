-- Attempts recorded with more than one outcome (first outcome wins: must be none).
SELECT count(*)::bigint AS attempts
  FROM (SELECT u.job_id, u.attempt
          FROM pgferry.completions c
         CROSS JOIN LATERAL unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
         GROUP BY u.job_id, u.attempt
        HAVING count(*) > 1) twice
