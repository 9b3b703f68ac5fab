-- A time as the user wrote it, in any format Postgres accepts.
SELECT $1::text::timestamptz AS t
