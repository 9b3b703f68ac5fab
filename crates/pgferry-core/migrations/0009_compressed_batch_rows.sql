-- Receipts and completions compress their per-job arrays inline (ADR 0009 §4).
--
-- 0004 kept rows up to a page inline and uncompressed (toast_tuple_target = 8160) because
-- pglz cost 5% of a claim's CPU. With lz4 (also set in 0004) compressing a batch row is a
-- few microseconds per batch, and at a batch of 200 the arrays are most of the WAL that
-- receipts and completions write: a receipt of 200 is 3,020 bytes, 931 compressed (job ids
-- come in runs of consecutive numbers; attempts and segments repeat one value); a
-- completion 2,504 bytes, ~860 compressed. That is ~18 of the 280 WAL bytes per job.
--
-- STORAGE MAIN lets rows above toast_tuple_target be compressed but never moved out of line
-- into the TOAST table (an extra heap row and index entry per batch) unless the compressed
-- row still exceeds a page's worth (TOAST_TUPLE_TARGET_MAIN): a batch of 1000 compresses to
-- about 4.5 kB and stays inline.
-- Every partition by name (detached ones too, ADR 0009) and the parents (for tables created
-- later; PG15 does not recurse reloptions).
DO $$
DECLARE
    s int;
    r text;
    c text;
BEGIN
    FOR s IN -1..15 LOOP
        -- Names are built from our own ring numbers, not from input; -1 is the parent.
        r := CASE WHEN s < 0 THEN 'receipts' ELSE 'receipts_' || lpad(s::text, 2, '0') END;
        c := CASE WHEN s < 0 THEN 'completions' ELSE 'completions_' || lpad(s::text, 2, '0') END;
        EXECUTE format('ALTER TABLE ONLY pgferry.%I ALTER COLUMN job_ids SET STORAGE MAIN, '
                       'ALTER COLUMN attempts SET STORAGE MAIN, '
                       'ALTER COLUMN job_segments SET STORAGE MAIN', r);
        EXECUTE format('ALTER TABLE ONLY pgferry.%I ALTER COLUMN job_ids SET STORAGE MAIN, '
                       'ALTER COLUMN attempts SET STORAGE MAIN, '
                       'ALTER COLUMN errors SET STORAGE MAIN, '
                       'ALTER COLUMN durations SET STORAGE MAIN', c);
        IF s >= 0 THEN
            EXECUTE format('ALTER TABLE pgferry.%I SET (toast_tuple_target = 512)', r);
            EXECUTE format('ALTER TABLE pgferry.%I SET (toast_tuple_target = 512)', c);
        END IF;
    END LOOP;
END $$;
