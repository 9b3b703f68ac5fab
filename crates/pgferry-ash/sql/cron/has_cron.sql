-- Whether pg_cron is installed in this database (its `cron` schema lives where
-- cron.database_name points).
SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_cron') AS present
