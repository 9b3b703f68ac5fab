-- Durable workflows: explicit state machines (DESIGN §3.5, docs/adr/0013-workflow-instances.md).
--
-- This file holds the tables; the plpgsql functions follow in migrations/0015_workflows/*.sql,
-- one function per file, concatenated into this migration in file order (migrate.rs).
--
-- Shape, in short (the ADR has the measurements and the reasons):
-- - wf_instances: one mutable row per instance. Updated on every step, so every update must
--   stay HOT: fillfactor leaves room on the page, and no index covers a column that changes
--   while an instance is active (status, step, state, attempt, step_seq, wake). The one
--   index predicate on a changing column is `active`, which flips once, at the terminal
--   transition.
-- - wf_ready: the picker. One row per instance that has something to run now or at a known
--   time (runnable, running under a lease, sleeping, awaiting with a deadline, rate-delayed).
--   `visible_at` is when it may be picked: a claim moves it to the lease's end, so an expired
--   lease, a due sleep and an await deadline are all "a row whose time has come" and need no
--   promoter or reaper. Instances that wait on something else (a signal without deadline,
--   children, a concurrency slot) have no row here, so the picker never walks past them.
-- - wf_key_waiters: steps whose concurrency key has no free slot; wf_keys counts the slots.
-- - wf_buckets: token buckets of rate limits.
-- - wf_signals: the inbox. wf_steps: append-only step history.

CREATE SEQUENCE pgferry.wf_instance_ids;

CREATE TABLE pgferry.wf_instances (
    id               bigint PRIMARY KEY DEFAULT nextval('pgferry.wf_instance_ids'),
    kind             text NOT NULL,
    queue            text NOT NULL,
    step             text NOT NULL,
    -- runnable | running | sleeping | awaiting | waiting_children | queued (no free
    -- concurrency slot) | done | failed | cancelled
    status           text NOT NULL,
    -- true until the terminal transition; the only changing column any index looks at.
    active           boolean NOT NULL DEFAULT true,
    state            jsonb NOT NULL DEFAULT '{}',
    input            jsonb NOT NULL DEFAULT '{}',
    result           jsonb,
    error            text,
    attempt          int NOT NULL DEFAULT 1,
    max_attempts     int NOT NULL DEFAULT 25,
    -- Bumped by every claim: an outcome names the claim it answers, so a late outcome
    -- (after a lease expired and the step was claimed again) is stale and changes nothing.
    step_seq         int NOT NULL DEFAULT 0,
    priority         smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9),
    -- What resumed the current step: 'signal', 'timeout' or 'children' (NULL: a plain step).
    wake             text,
    awaits           text[],
    await_deadline   timestamptz,
    -- step_seq of the await whose signals were consumed (the inbox the next step sees).
    await_gen        int,
    parent_id        bigint,
    -- The parent's step_seq at the spawn: a join counts only children of the current spawn.
    parent_gen       int,
    join_mode        text CHECK (join_mode IN ('all', 'any')),
    join_gen         int,
    children_pending int NOT NULL DEFAULT 0,
    child_failure    text CHECK (child_failure IN ('fail_parent', 'deliver')),
    correlation_key  text,
    concurrency_key  text,
    -- Holds one of its concurrency key's slots (from emission until its step's outcome).
    has_slot         boolean NOT NULL DEFAULT false,
    rate_key         text,
    worker           text,
    step_started_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
) WITH (fillfactor = 50);

-- One active instance per (queue, correlation key): a second start returns the first.
CREATE UNIQUE INDEX wf_instances_correlation ON pgferry.wf_instances (queue, correlation_key)
    WHERE active AND correlation_key IS NOT NULL;
-- Children of a parent (join results, cancel cascade). parent_id never changes.
CREATE INDEX wf_instances_parent ON pgferry.wf_instances (parent_id, parent_gen)
    WHERE parent_id IS NOT NULL;
-- Listing by queue, newest first (keyset on id). Neither column ever changes.
CREATE INDEX wf_instances_queue ON pgferry.wf_instances (queue, id);
-- Retention: terminal instances by age (entered once, at the terminal transition).
CREATE INDEX wf_instances_finished ON pgferry.wf_instances (finished_at) WHERE NOT active;

CREATE TABLE pgferry.wf_ready (
    instance_id bigint PRIMARY KEY,
    queue       text NOT NULL,
    priority    smallint NOT NULL,
    visible_at  timestamptz NOT NULL
) WITH (fillfactor = 80);
-- The picker: equality on (queue, priority), due rows first; a claim stops at its batch or at
-- the first row not yet due.
CREATE INDEX wf_ready_pick ON pgferry.wf_ready (queue, priority, visible_at);

-- Machines' capability flags (1 = inbox, 2 = children), written when a worker registers
-- its machines. A kind not listed loads neither.
CREATE TABLE pgferry.wf_kinds (
    kind       text PRIMARY KEY,
    caps       smallint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgferry.wf_keys (
    key     text PRIMARY KEY,
    max     int NOT NULL CHECK (max >= 1),
    running int NOT NULL DEFAULT 0 CHECK (running >= 0)
);

CREATE TABLE pgferry.wf_key_waiters (
    key         text NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    instance_id bigint NOT NULL,
    PRIMARY KEY (key, seq)
);
CREATE INDEX wf_key_waiters_instance ON pgferry.wf_key_waiters (instance_id);

CREATE TABLE pgferry.wf_buckets (
    key    text PRIMARY KEY,
    -- tokens per second and bucket size
    rate   float8 NOT NULL CHECK (rate > 0),
    burst  float8 NOT NULL CHECK (burst >= 1),
    -- tokens at `at` (negative: tokens already promised to delayed steps)
    tokens float8 NOT NULL,
    at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgferry.wf_signals (
    signal_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id  bigint NOT NULL,
    name         text NOT NULL,
    payload      jsonb NOT NULL DEFAULT 'null',
    sent_at      timestamptz NOT NULL DEFAULT now(),
    -- the await (its step_seq) that consumed it; NULL while in the inbox
    consumed_gen int,
    consumed_at  timestamptz
);
-- Unconsumed signals of an instance by name, oldest first.
CREATE INDEX wf_signals_inbox ON pgferry.wf_signals (instance_id, name, signal_id)
    WHERE consumed_gen IS NULL;
-- Signals consumed by one await (what the resumed step sees).
CREATE INDEX wf_signals_consumed ON pgferry.wf_signals (instance_id, consumed_gen)
    WHERE consumed_gen IS NOT NULL;

-- Append-only: one row per step outcome.
CREATE TABLE pgferry.wf_steps (
    instance_id bigint NOT NULL,
    step_seq    int NOT NULL,
    step        text NOT NULL,
    attempt     int NOT NULL,
    outcome     text NOT NULL,
    error       text,
    worker      text,
    started_at  timestamptz,
    finished_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX wf_steps_instance ON pgferry.wf_steps (instance_id, step_seq);
