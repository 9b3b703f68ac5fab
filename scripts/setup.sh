#!/usr/bin/env bash
# Installs what pgferry's build and tests need and is missing on this machine.
# As root (CI, fresh Debian/Ubuntu machines) it uses apt-get; otherwise it prints the exact
# command to run. Safe to run repeatedly: it does nothing when everything is present.
set -euo pipefail

need=()

have_pg_server() {
    [ -n "${PGFERRY_PG_BINDIR:-}" ] && [ -x "$PGFERRY_PG_BINDIR/postgres" ] && return 0
    command -v postgres >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1 && return 0
    if command -v pg_config >/dev/null 2>&1; then
        local d; d="$(pg_config --bindir 2>/dev/null || true)"
        [ -x "$d/postgres" ] && [ -x "$d/initdb" ] && return 0
    fi
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/postgres" ] && [ -x "$d/initdb" ] && return 0
    done
    return 1
}

have_pg_server || need+=(postgresql)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
# pg_cron for the ASH pg_cron mode's test (crates/pgferry-ash/tests/cron.rs), for each
# installed server major version.
for d in /usr/lib/postgresql/*/lib; do
    [ -d "$d" ] && [ ! -e "$d/pg_cron.so" ] && need+=("postgresql-$(basename "$(dirname "$d")")-cron")
done
# A C compiler: rustc links through `cc`, and libmimalloc-sys (the binary's allocator)
# compiles mimalloc's C sources.
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-venv)
# Debian splits venv/ensurepip out of python3: the Python SDK tests and `make test-fuzz`
# need them.
command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1 && need+=(python3-venv)
# Node.js and npm: the TypeScript SDK's build and tests (`make test-ts`; Node >= 20).
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# The dashboard's browser tests (crates/pgferry-dashboard/tests/browser.rs) drive a real
# headless Chromium through chromedriver.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "setup: missing system packages: ${need[*]}" >&2
        echo "setup: install them with: sudo apt-get install -y ${need[*]}" >&2
        exit 1
    fi
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        echo "setup: cargo is in ~/.cargo/bin but not on PATH; add it: export PATH=\$HOME/.cargo/bin:\$PATH" >&2
    else
        echo "setup: a Rust toolchain (cargo, rustc >= 1.80) is required: https://rustup.rs" >&2
    fi
    exit 1
fi
for comp in rustfmt clippy; do
    if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
        if command -v rustup >/dev/null 2>&1; then
            rustup component add "$comp"
        else
            echo "setup: cargo $comp is missing (rustup component add $comp)" >&2
            exit 1
        fi
    fi
done
# Opt-in second Postgres major for the ASH tests (`make test-ash-pg16`, docs/ash.md):
# PGFERRY_EXTRA_PG=16 unpacks PostgreSQL 16.2 from the PyPI wheel `pgserver` (a registry
# package shipping the server binaries; apt.postgresql.org does not resolve from the
# project's machines and Debian 12 ships only 15) into $PGFERRY_EXTRA_PG_DIR; the binaries
# are then in $PGFERRY_EXTRA_PG_DIR/pgserver/pginstall/bin.
if [ "${PGFERRY_EXTRA_PG:-}" = 16 ]; then
    pg16="${PGFERRY_EXTRA_PG_DIR:-/opt/pgferry-pg16}"
    # The wheel's layout is kept: its binaries find their libraries by a relative rpath.
    if [ ! -x "$pg16/pgserver/pginstall/bin/postgres" ]; then
        tmp="$(mktemp -d)"
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
            --platform manylinux2014_x86_64 pgserver==0.1.4 -d "$tmp"
        python3 -m zipfile -e "$tmp"/pgserver-0.1.4-*.whl "$tmp/x"
        mkdir -p "$pg16"
        cp -r "$tmp/x/." "$pg16/"
        chmod -R a+rX "$pg16"
        chmod a+x "$pg16"/pgserver/pginstall/bin/*
        rm -rf "$tmp"
    fi
    "$pg16/pgserver/pginstall/bin/postgres" --version
fi
echo "setup: ok"
