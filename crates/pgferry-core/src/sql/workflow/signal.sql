-- Send a signal by instance id ($1) or by queue and correlation key ($2, $3): pgferry.wf_signal.
-- $4 name, $5 payload.
SELECT signal_id, instance_id, delivered
  FROM pgferry.wf_signal($1::bigint, $2::text, $3::text, $4::text, $5::jsonb)
