
-- The key sweeper's work on one key (workflow/sweeper.rs): a free slot that no waiter took.
-- wf_free_slot and wf_rr_promote skip a waiter another transaction holds (never wait), so
-- a slot given back while a key's only waiters were held (a late, stale outcome of a
-- child locking its parent's chain) stays free, and those waiters would wait for the
-- key's next outcome or start, which may never come. Here each free slot is taken and
-- given back through wf_free_slot, as wf_signal does for a queued instance, so the one
-- rule of who gets a freed slot (the oldest waiter; a round_robin key's turn in the
-- picker) is wf_free_slot's, and the key's limit is wf_take_slot's.
-- The key's row is skipped when someone else holds it: that transaction is taking or
-- giving back a slot of the key right now, and the sweeper never makes it wait. Before a
-- slot is taken, the oldest waiter nobody else holds is locked (wf_free_slot's own pick
-- then finds it), so a key whose waiters are all held keeps its count untouched.
-- Returns how many waiters were promoted.
CREATE OR REPLACE FUNCTION pgferry.wf_sweep_key(p_key text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    k record;
    v_seq bigint;
    v_queue text;
    n int := 0;
BEGIN
    SELECT kk.strategy INTO k FROM pgferry.wf_keys kk WHERE kk.key = p_key
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    LOOP
        SELECT kw.seq, i.queue INTO v_seq, v_queue
          FROM pgferry.wf_key_waiters kw
          JOIN pgferry.wf_instances i ON i.id = kw.instance_id
         WHERE kw.key = p_key
         ORDER BY kw.seq
         LIMIT 1
           FOR UPDATE OF kw, i SKIP LOCKED;
        EXIT WHEN NOT FOUND OR NOT pgferry.wf_take_slot(p_key);
        PERFORM pgferry.wf_free_slot(p_key);
        -- Not promoted: a round_robin key whose representative is live (the statement saw
        -- none; one came since), which keeps the slot free for the claim that takes it.
        EXIT WHEN EXISTS (SELECT 1 FROM pgferry.wf_key_waiters kw
                           WHERE kw.key = p_key AND kw.seq = v_seq);
        n := n + 1;
        -- Idle workers of the queue claim at once (as after wf_signal), not at their next
        -- poll: delivered at COMMIT, one per (transaction, queue).
        PERFORM pg_notify('pgferry_wf_ready', v_queue);
        -- A round_robin key keeps one step in the picker: the one just promoted.
        EXIT WHEN k.strategy = 'round_robin';
    END LOOP;
    RETURN n;
END $$;
