-- Removes the sampler job, if scheduled; true when one was removed.
SELECT coalesce((SELECT cron.unschedule(jobid) FROM cron.job
                 WHERE jobname = 'pgferry-ash'), false) AS removed
