-- Run a failed instance again from its failed step: pgferry.wf_retry. $1 id.
SELECT pgferry.wf_retry($1::bigint) AS step
