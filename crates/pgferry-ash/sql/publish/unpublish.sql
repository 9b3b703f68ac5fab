-- A server stopping removes its snapshot. $1 server.
DELETE FROM pgferry_ash.published WHERE server = $1::text
