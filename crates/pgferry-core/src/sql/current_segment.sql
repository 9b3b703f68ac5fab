-- The segment new rows go to. One row (segments_one_current); the table has 16 rows.
SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'
