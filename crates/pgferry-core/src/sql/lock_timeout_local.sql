-- For the rest of this transaction only: give up on a lock after 100 ms. Creating a queue on
-- the engine's own connection while another transaction holds an uncommitted insert of the
-- same queue would otherwise wait for that transaction (possibly the caller's own).
SELECT set_config('lock_timeout', '100ms', true)
