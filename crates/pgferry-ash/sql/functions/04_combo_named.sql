-- Each combo with its names. pgferry_role: the part of pgferry a backend belongs to — what it
-- was serving when sampled (claimer, enqueuer, completer) when the sampling process knew, else
-- from the application_name every pgferry connection sets (pgferry-<role>). queue: the engine
-- queue it served (t<tenant>.<queue> for a tenant's queue); tenant: the id in that prefix.
CREATE OR REPLACE VIEW pgferry_ash.combo_named AS
SELECT c.id AS combo,
       w.type AS wait_type,
       w.event AS wait_event,
       q.query_id,
       q.text AS query_text,
       coalesce(d.name, '') AS database,
       coalesce(u.name, '') AS user_name,
       coalesce(a.name, '') AS application,
       coalesce(s.role,
                CASE WHEN a.name LIKE 'pgferry-%' THEN substr(a.name, 9) END) AS pgferry_role,
       coalesce(b.name, '') AS backend_type,
       nullif(s.queue, '') AS queue,
       nullif(s.kind, '') AS job_kind,
       substring(s.queue FROM '^t([0-9]+)\.') AS tenant
FROM pgferry_ash.combo c
JOIN pgferry_ash.wait_event w ON w.id = c.wait_id
LEFT JOIN pgferry_ash.query q ON q.id = c.query_ref
LEFT JOIN pgferry_ash.label d ON d.id = c.database_id
LEFT JOIN pgferry_ash.label u ON u.id = c.user_id
LEFT JOIN pgferry_ash.label a ON a.id = c.app_id
LEFT JOIN pgferry_ash.label b ON b.id = c.backend_id
LEFT JOIN pgferry_ash.serving s ON s.id = c.serving_id
