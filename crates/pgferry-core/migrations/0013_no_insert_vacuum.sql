-- The log partitions are never vacuumed for their inserts (DESIGN §1.2: space comes back by
-- TRUNCATE of whole segments, never by VACUUM).
--
-- Since Postgres 13 autovacuum also vacuums a table after enough inserts (the insert
-- threshold: 1000 rows + 20% of the table). For a ready partition that takes a million rows
-- in a few seconds, it then runs again and again. `bench cycle --duration 12` on the scratch
-- cluster saw ready_00, receipts_00, completions_00 and ticks_00 each vacuumed twice in one
-- run. Each vacuum reads the whole partition while the hot path runs, and writes
-- visibility-map records and full-page images for pages that will be truncated minutes
-- later. There is nothing to reclaim (the hot path never updates or deletes a log row), and
-- no hot statement reads the visibility map (no index-only scans on log partitions).
--
-- Only insert-triggered vacuums are turned off:
-- - autoanalyze still keeps statistics for the listing and lookup statements;
-- - a vacuum for dead tuples still runs if any appear (rolled-back inserts);
-- - anti-wraparound vacuums cannot be turned off and still run when a partition's
--   relfrozenxid gets old. TRUNCATE resets it, so in practice only on segments kept for a
--   very long retention.
--
-- Measured on the scratch cluster, `bench cycle` with autovacuum on vs off for the whole
-- cluster, two alternating pairs: 60,675 vs 66,600 and 68,211 vs 71,169 jobs/s (ADR 0011).
-- Every partition by name, detached ones too (ADR 0009); TOAST tables as well (large args).
-- The reloption survives TRUNCATE, DETACH and ATTACH.
DO $$
DECLARE
    s int;
    t text;
BEGIN
    FOR s IN 0..15 LOOP
        FOREACH t IN ARRAY ARRAY['ready', 'receipts', 'completions', 'results', 'ticks'] LOOP
            -- Names are built from our own ring numbers and table list, not from input.
            EXECUTE format('ALTER TABLE pgferry.%I SET (autovacuum_vacuum_insert_threshold = -1, '
                           'toast.autovacuum_vacuum_insert_threshold = -1)',
                           t || '_' || lpad(s::text, 2, '0'));
        END LOOP;
    END LOOP;
END $$;
