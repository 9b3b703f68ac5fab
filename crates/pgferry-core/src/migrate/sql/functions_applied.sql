-- $1 component
SELECT name, checksum FROM pgferry.schema_functions WHERE component = $1
