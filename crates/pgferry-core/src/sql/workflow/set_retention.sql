-- Retention of a queue's ended instances. $1 queue, $2 retention in seconds.
INSERT INTO pgferry.wf_queue_retention (queue, retention)
VALUES ($1::text, make_interval(secs => $2::float8))
ON CONFLICT (queue) DO UPDATE SET retention = EXCLUDED.retention
