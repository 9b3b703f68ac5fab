-- Schedules (or reschedules: pg_cron upserts by name) the sampler job every minute; the
-- procedure samples every $1 ms until the minute ends. $2: databases to sample (NULL: all).
SELECT cron.schedule('pgferry-ash', '* * * * *',
                     format('CALL pgferry_ash.sample_minute(%s, %L)', $1::int,
                            $2::text[])) AS job_id
