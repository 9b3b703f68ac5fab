SELECT floor(extract(epoch FROM now()) / extract(epoch FROM period))::bigint AS period_no
FROM pgferry_ash.ring
