-- take_sample()'s backends (a jsonb array of its read of pg_stat_activity) with the
-- dictionary ids of their names; 0 for an empty name, no query id or no pgferry attribution
-- (srole / squeue / skind).
CREATE OR REPLACE FUNCTION pgferry_ash.activity_ids(rows jsonb)
RETURNS TABLE (pid int, sampled bool, by int[], wait_id int, query_ref int, database_id int,
               user_id int, app_id int, backend_id int, serving_id int)
LANGUAGE sql STABLE AS $$
    SELECT r.pid, r.sampled, r.by, w.id, coalesce(q.id, 0), coalesce(d.id, 0),
           coalesce(u.id, 0), coalesce(ap.id, 0), coalesce(b.id, 0), coalesce(s.id, 0)
    FROM jsonb_to_recordset(rows) AS r (pid int, sampled bool, by int[], datname text,
                                        usename text, app text, btype text, wt text,
                                        we text, qid bigint, srole text, squeue text,
                                        skind text)
    JOIN pgferry_ash.wait_event w ON w.type = r.wt AND w.event = r.we
    LEFT JOIN pgferry_ash.query q ON q.query_id = r.qid
    LEFT JOIN pgferry_ash.label d ON d.kind = 'd' AND d.name = r.datname
    LEFT JOIN pgferry_ash.label u ON u.kind = 'u' AND u.name = r.usename
    LEFT JOIN pgferry_ash.label ap ON ap.kind = 'a' AND ap.name = r.app
    LEFT JOIN pgferry_ash.label b ON b.kind = 'b' AND b.name = r.btype
    LEFT JOIN pgferry_ash.serving s
      ON s.role = r.srole AND s.queue = r.squeue AND s.kind = r.skind
$$
