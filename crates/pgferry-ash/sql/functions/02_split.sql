-- Splits [since, until) into the parts each source answers for, finest first at the edges:
--   raw samples   [since, m_lo) and [m_hi, until)
--   1-minute rollups [m_lo, h_lo) and [h_hi, m_hi)   (whole minutes below the watermark)
--   1-hour rollups   [h_lo, h_hi)                    (whole hours below the watermark)
-- finest: the smallest time step the caller needs (a timeline bucket); a rollup coarser
-- than it is not used. An empty part has lo = hi.
CREATE OR REPLACE FUNCTION pgferry_ash.split(since timestamptz, until timestamptz,
                                             finest interval)
RETURNS TABLE (m_lo timestamptz, h_lo timestamptz, h_hi timestamptz, m_hi timestamptz)
LANGUAGE sql STABLE AS $$
    WITH b AS (
        SELECT CASE WHEN date_trunc('minute', since, 'UTC') = since THEN since
                    ELSE date_trunc('minute', since, 'UTC') + interval '1 minute' END AS ml,
               least(date_trunc('minute', until, 'UTC'),
                     coalesce(s.minute_to, '-infinity')) AS mh,
               coalesce(s.hour_to, '-infinity'::timestamptz) AS hw
        FROM pgferry_ash.rollup_state s
    ), m AS (
        SELECT CASE WHEN finest >= interval '1 minute' AND mh > ml THEN ml ELSE since END AS lo,
               CASE WHEN finest >= interval '1 minute' AND mh > ml THEN mh ELSE since END AS hi,
               hw
        FROM b
    ), h AS (
        SELECT m.lo, m.hi,
               CASE WHEN date_trunc('hour', m.lo, 'UTC') = m.lo THEN m.lo
                    ELSE date_trunc('hour', m.lo, 'UTC') + interval '1 hour' END AS hl,
               least(date_trunc('hour', m.hi, 'UTC'), m.hw) AS hh
        FROM m
    )
    SELECT lo,
           CASE WHEN finest >= interval '1 hour' AND hh > hl THEN hl ELSE lo END,
           CASE WHEN finest >= interval '1 hour' AND hh > hl THEN hh ELSE lo END,
           hi
    FROM h
$$
