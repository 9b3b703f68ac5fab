-- Cancel an instance and its descendants: pgferry.wf_cancel. $1 id, $2 reason.
SELECT pgferry.wf_cancel($1::bigint, $2::text) AS previous
