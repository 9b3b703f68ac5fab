-- Free segments are detached (ADR 0009): a segment's five partitions are attached to their
-- parents only while the segment is in use (current, sealed or freeing), and for the one
-- free segment that opens next. The rotator leaves them detached after truncating and
-- attaches the next segment's a whole segment before it opens (rotator.rs, `advance`).
--
-- Why: every hot statement (claim's cursor probe, its four ready reads, the tick probe,
-- complete's receipt probe) is a generic plan over the parent, and each execution locks every
-- attached partition and starts an index scan in each — with 16 attached that start-up was
-- about two thirds of a claim's time. Detached partitions are not in the plan at all.
--
-- A COPY that still names a freed segment (a producer's cached segment number, ids.rs) fails
-- with "no partition … found for row" and is retried with the current segment.
DO $$
DECLARE
    s smallint;
    t text;
BEGIN
    FOR s IN SELECT f.segment
               FROM pgferry.segments f
              WHERE f.state = 'free'
                AND f.segment <> (SELECT (c.segment + 1) % 16 FROM pgferry.segments c
                                   WHERE c.state = 'current')
              ORDER BY f.segment LOOP
        FOREACH t IN ARRAY ARRAY['ready', 'receipts', 'completions', 'results', 'ticks'] LOOP
            IF EXISTS (SELECT 1 FROM pg_inherits
                        WHERE inhrelid = format('pgferry.%I', t || '_' || lpad(s::text, 2, '0'))::regclass) THEN
                EXECUTE format('ALTER TABLE pgferry.%I DETACH PARTITION pgferry.%I',
                               t, t || '_' || lpad(s::text, 2, '0'));
            END IF;
        END LOOP;
    END LOOP;
END $$;
