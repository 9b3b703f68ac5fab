# Two commands: `make dev` and `make test`. Both install what is missing first.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo

.PHONY: dev test setup build lint test-rust test-python test-ts test-fuzz bench screenshots

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build -p pgferry-cli

# Runs pgferry on its own embedded Postgres under ./.pgferry; Ctrl-C stops both.
dev: build
	$(CARGO) run -q -p pgferry-cli --bin pgferry -- dev

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-rust: setup
	$(CARGO) test --workspace

# Python SDK (sdk/python): its own venv, mypy --strict, then pytest against the real
# `pgferry dev` binary built above (PGFERRY_BIN overrides which binary the tests start).
PY_VENV := sdk/python/.venv
PGFERRY_BIN ?= $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/debug/pgferry
export PGFERRY_BIN

test-python: setup
	$(CARGO) build -p pgferry-cli
	@test -x $(PY_VENV)/bin/python || python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check hatchling grpcio-tools grpcio protobuf pytest pytest-timeout mypy types-grpcio types-protobuf opentelemetry-api opentelemetry-sdk
	# The task API's optional pydantic support and the framework examples (FastAPI, Django).
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check pydantic fastapi httpx django
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e sdk/python
	cd sdk/python && .venv/bin/mypy
	cd sdk/python && .venv/bin/mypy --strict examples/typed_app.py examples/fastapi_app.py examples/workflow_app.py
	cd sdk/python && .venv/bin/python -m pytest -q -p no:cacheprovider --timeout 600

# TypeScript SDK (sdk/typescript): `npm ci` from the committed lock file, strict tsc (ESM
# and CJS builds, the type-level test), then `node --test` against the real `pgferry dev`
# binary built above (PGFERRY_BIN overrides which binary the tests start).
test-ts: setup
	$(CARGO) build -p pgferry-cli
	cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm test

# Schema-driven fuzzing of the HTTP API from /v1/openapi.json with schemathesis (own venv
# .venv-fuzz; bounded examples per operation, well under two minutes): no 5xx, answers
# conform to the document.
test-fuzz: setup
	$(CARGO) build -p pgferry-cli
	scripts/fuzz-http.sh

test: lint test-rust test-python test-ts test-fuzz

# Active session history on a second Postgres major: 16.2 from PyPI (scripts/setup.sh with
# PGFERRY_EXTRA_PG=16). Opt-in, not part of `test`. That build ships neither
# pg_stat_statements nor pg_cron nor lz4 (the engine schema needs it), so the tests that need
# them (attribution.rs: the engine; cron.rs; the pg_stat_statements test; and the waits test
# that asserts query ids, which its backends do not report without pg_stat_statements)
# run on 15 only.
.PHONY: test-ash-pg16
test-ash-pg16:
	PGFERRY_EXTRA_PG=16 scripts/setup.sh
	PGFERRY_TEST_PRELOAD= PGFERRY_PG_BINDIR=$${PGFERRY_EXTRA_PG_DIR:-/opt/pgferry-pg16}/pgserver/pginstall/bin $(CARGO) test -p pgferry-ash \
		--test published --test ring --test waits \
		-- --skip query_text_from_pg_stat_statements_and_no_query_id_degrade \
		--skip lock_waits_sleep_and_idle_in_transaction_are_reported

# The engine benchmark against the skiplocked and append-only references (release build).
bench: setup
	$(CARGO) run --release -q -p pgferry-cli --bin pgferry -- bench compare --json

# Every fault of the chaos suite for 60 s each, with the per-job ledger (docs/reliability.md);
# short runs of each are part of test-rust (crates/pgferry-cli/tests/chaos_*.rs).
.PHONY: chaos
chaos: build
	$(CARGO) run -q -p pgferry-cli --bin pgferry -- chaos --json --duration 60

# Re-takes the dashboard screenshots in docs/screenshots (the browser tests save them under
# the target dir otherwise; they run in `make test` as part of test-rust).
screenshots: setup
	PGFERRY_SCREENSHOTS=$(CURDIR)/docs/screenshots $(CARGO) test -p pgferry-dashboard --test browser --test workflows_browser --test schedules_browser --test ash_browser --test bulk_browser --test http_browser --test queues_browser --test search_browser --test webhooks_browser --test monitors_browser --test manage_browser
