-- A loop that times pgferry.wf_finish (or another definition of it, by name) on batches of
-- 200 plain outcomes, each statement in its own transaction: 200 instances started and
-- claimed, then two continued `next`s and a `done`. Used for docs/performance.md ("One
-- array of answers"); not part of pgferry. On a migrated scratch database:
--
--   psql -d DB -f old_definition.sql   # e.g. the previous wf_finish renamed wf_finish_old
--   psql -d DB -f scripts/wf-finish-loop.sql
--   psql -d DB -c "call fin_bench('wf_finish', 25)" -c "call fin_bench('wf_finish_old', 25)"
--   psql -d DB -c "select fn, outcome, count(*), avg(ms) from fin_times group by 1, 2"
--
-- It writes instances of the queue 'finq' and its timings into public.fin_times.
CREATE TABLE IF NOT EXISTS public.fin_times (fn text, outcome text, ms float8);
CREATE OR REPLACE PROCEDURE public.fin_bench(p_fn text, p_rounds int) LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[]; v_seqs int[]; o jsonb; t0 timestamptz; k int; r int;
BEGIN
  FOR r IN 1..p_rounds LOOP
    -- Started through pgferry.wf_start (untimed), as any SQL caller would.
    PERFORM pgferry.wf_start('three', 'finq', 'one',
                             '{"payload":"0123456789012345678901234567890123456789012345678901234567890123"}',
                             NULL, NULL, NULL, NULL, NULL, 0::smallint, NULL, NULL)
       FROM generate_series(1, 200);
    COMMIT;
    SELECT array_agg(c.id ORDER BY c.id), array_agg(c.step_seq ORDER BY c.id) INTO v_ids, v_seqs
      FROM pgferry.wf_claim('finq', 200, 'w', 60000) c;
    COMMIT;
    FOR k IN 1..3 LOOP
      SELECT jsonb_agg(CASE WHEN k < 3 THEN
               jsonb_build_object('id', u.id, 'seq', u.seq, 'outcome', 'next', 'step', 's' || (k + 1),
                                  'state', jsonb_build_object('i', k), 'continue_lease_ms', 60000)
             ELSE jsonb_build_object('id', u.id, 'seq', u.seq, 'outcome', 'done', 'result', jsonb_build_object('ok', true)) END
             ORDER BY u.id)
        INTO o FROM unnest(v_ids, v_seqs) AS u(id, seq);
      t0 := clock_timestamp();
      EXECUTE format('SELECT array_agg(f.cont_step_seq ORDER BY f.id) FROM pgferry.%I($1) f', p_fn) INTO v_seqs USING o;
      INSERT INTO public.fin_times VALUES (p_fn, CASE WHEN k < 3 THEN 'next' ELSE 'done' END,
                                           extract(epoch FROM clock_timestamp() - t0) * 1000);
      COMMIT;
    END LOOP;
  END LOOP;
END $$;
