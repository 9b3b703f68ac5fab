-- Free segments are detached (ADR 0009): a segment's five partitions are attached to their
-- parents only while the segment is in use (current, sealed or freeing). The rotator leaves
-- them detached after truncating and attaches them in the transaction that makes the segment
-- current (rotator.rs, `advance`).
--
-- Why: every hot statement (claim's cursor probe, its four ready reads, the tick probe,
-- complete's receipt probe) is a generic plan over the parent, and each execution locks every
-- attached partition and starts an index scan in each — with 16 attached that start-up was
-- about two thirds of a claim's time. Detached partitions are not in the plan at all.
--
-- It also makes "rows of a free segment" impossible rather than unlikely: a COPY that still
-- names a freed segment (a producer's cached segment number, ids.rs) fails with "no partition
-- … found for row" and is retried with the current segment, instead of landing in a segment
-- no claim reads.
DO $$
DECLARE
    s smallint;
    t text;
BEGIN
    FOR s IN SELECT segment FROM pgferry.segments WHERE state = 'free' ORDER BY segment LOOP
        FOREACH t IN ARRAY ARRAY['ready', 'receipts', 'completions', 'results', 'ticks'] LOOP
            IF EXISTS (SELECT 1 FROM pg_inherits
                        WHERE inhrelid = format('pgferry.%I', t || '_' || lpad(s::text, 2, '0'))::regclass) THEN
                EXECUTE format('ALTER TABLE pgferry.%I DETACH PARTITION pgferry.%I',
                               t, t || '_' || lpad(s::text, 2, '0'));
            END IF;
        END LOOP;
    END LOOP;
END $$;
