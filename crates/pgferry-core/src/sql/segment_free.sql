-- $1 segment just truncated
UPDATE pgferry.segments SET state = 'free', opened_at = NULL, sealed_at = NULL
 WHERE segment = $1 AND state = 'sealed'
