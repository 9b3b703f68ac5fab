-- The pg_cron mode's job (docs/ash.md): samples every interval_ms until the end of the
-- current minute, committing each sample, so a schedule of '* * * * *' (pg_cron 1.4 has no
-- second schedules) samples continuously. A session advisory lock keeps overlapping runs
-- from sampling twice; the leader's sampler must be off (`--ash-interval-ms 0`).
CREATE OR REPLACE PROCEDURE pgferry_ash.sample_minute(interval_ms int DEFAULT 1000,
                                                      databases text[] DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    v_end timestamptz := date_trunc('minute', clock_timestamp()) + interval '1 minute';
    v_step interval := make_interval(secs => interval_ms / 1000.0);
    -- Samples fall on the wall clock's multiples of the interval, the ticks at which every
    -- pgferry server publishes what its backends serve (src/publish.rs).
    v_next timestamptz := to_timestamp(ceil(extract(epoch FROM clock_timestamp()) * 1000
                                            / interval_ms) * interval_ms / 1000.0);
BEGIN
    IF NOT pg_try_advisory_lock(hashtext('pgferry_ash.sample_minute')) THEN
        RETURN;
    END IF;
    -- A sample lost in a crash costs nothing worth a WAL flush per second (as the server's).
    PERFORM set_config('synchronous_commit', 'off', false);
    WHILE v_next < v_end LOOP
        PERFORM pg_sleep(greatest(0, extract(epoch FROM v_next - clock_timestamp())));
        PERFORM pgferry_ash.take_sample(interval_ms, databases);
        COMMIT;
        v_next := v_next + v_step;
    END LOOP;
    -- Prune the rollups past their default retention (8 days of minutes, 400 of hours).
    DELETE FROM pgferry_ash.rollup_1m WHERE minute < now() - interval '8 days';
    DELETE FROM pgferry_ash.rollup_1h WHERE hour < now() - interval '400 days';
    COMMIT;
    PERFORM pg_advisory_unlock(hashtext('pgferry_ash.sample_minute'));
END $$
