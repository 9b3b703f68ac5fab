# Two commands: `make dev` and `make test`. Both install what is missing first.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo

.PHONY: dev test setup build lint test-rust bench

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

test: lint test-rust

# The engine benchmark against the skiplocked and append-only references (release build).
bench: setup
	$(CARGO) run --release -q -p pgferry-cli --bin pgferry -- bench compare --json
