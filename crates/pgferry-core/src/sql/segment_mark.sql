-- Move a segment between rotation states. $1 segment, $2 from state, $3 to state.
UPDATE pgferry.segments
   SET state = $3,
       opened_at = CASE WHEN $3 = 'free' THEN NULL ELSE opened_at END,
       sealed_at = CASE WHEN $3 = 'free' THEN NULL ELSE sealed_at END
 WHERE segment = $1 AND state = $2
