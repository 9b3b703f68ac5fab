-- The database's clock (epoch seconds): the publisher's first clock mapping.
SELECT extract(epoch FROM clock_timestamp())::float8 AS db_now
