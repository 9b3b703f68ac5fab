-- A rotation's first statement: the endpoint, locked so that two rotations of it run one
-- after the other (each retires the address the other one set).
SELECT id, address FROM pgferry_mon.endpoints WHERE tenant_id = $1 AND slug = $2 FOR UPDATE
