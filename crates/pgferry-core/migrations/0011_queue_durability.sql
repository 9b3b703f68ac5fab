-- Durability is a per-queue choice, default safe (DESIGN §1.7). A queue with async_commit
-- has its hot-path writes (enqueue COPY, claim receipt, completion batch) committed with
-- synchronous_commit = off: acknowledged work can be lost in the last fraction of a second
-- before a Postgres crash (wal_writer_delay, at most 3x), never half of a statement, and a
-- later synchronous commit flushes everything written before it. A batch that mixes queues
-- commits synchronously if any of its queues does.
ALTER TABLE pgferry.queues ADD COLUMN async_commit boolean NOT NULL DEFAULT false;
