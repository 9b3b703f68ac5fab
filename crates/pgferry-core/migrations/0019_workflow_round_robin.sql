-- Workflows, issue 19: the round_robin concurrency strategy (docs/workflows.md,
-- "Round-robin keys"; docs/adr/0016-set-based-outcomes.md, addendum).
--
-- A round_robin key keeps at most one due step in the picker, its representative (`rep`),
-- which holds one of the key's slots; the key's other due steps wait among its waiters.
-- Since the picker is oldest-due first, keys' representatives take turns, and a key with a
-- long backlog gets one place in the line like a key with one step. The claim that takes a
-- representative serves more of its key if the batch has room, and puts the key's next
-- representative at the back of the line.
ALTER TABLE pgferry.wf_keys DROP CONSTRAINT wf_keys_strategy_check;
ALTER TABLE pgferry.wf_keys ADD CONSTRAINT wf_keys_strategy_check
    CHECK (strategy IN ('queue', 'cancel_in_progress', 'cancel_newest', 'round_robin'));
-- The instance that is the key's step waiting in the picker (round_robin keys only), or NULL.
ALTER TABLE pgferry.wf_keys ADD COLUMN rep bigint;

-- wf_take_slot takes the instance that becomes the key's representative (a new parameter
-- with a default: its one-argument callers are unchanged). Its new definition is
-- src/sql/functions/wf_take_slot.sql, applied after this migration (ADR 0017).
DROP FUNCTION IF EXISTS pgferry.wf_take_slot(text);
