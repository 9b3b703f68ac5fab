-- Inside the held transaction: take an xid, which holds the vacuum horizon back.
SELECT pg_current_xact_id()::text AS xid
