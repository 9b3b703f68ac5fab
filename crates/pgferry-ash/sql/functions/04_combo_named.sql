-- Each combo with its names. pgferry_role: the part of pgferry a backend belongs to, from
-- the application_name every pgferry connection sets (pgferry-<role>).
CREATE OR REPLACE VIEW pgferry_ash.combo_named AS
SELECT c.id AS combo,
       w.type AS wait_type,
       w.event AS wait_event,
       q.query_id,
       q.text AS query_text,
       coalesce(d.name, '') AS database,
       coalesce(u.name, '') AS user_name,
       coalesce(a.name, '') AS application,
       CASE WHEN a.name LIKE 'pgferry-%' THEN substr(a.name, 9) END AS pgferry_role,
       coalesce(b.name, '') AS backend_type
FROM pgferry_ash.combo c
JOIN pgferry_ash.wait_event w ON w.id = c.wait_id
LEFT JOIN pgferry_ash.query q ON q.id = c.query_ref
LEFT JOIN pgferry_ash.label d ON d.id = c.database_id
LEFT JOIN pgferry_ash.label u ON u.id = c.user_id
LEFT JOIN pgferry_ash.label a ON a.id = c.app_id
LEFT JOIN pgferry_ash.label b ON b.id = c.backend_id
