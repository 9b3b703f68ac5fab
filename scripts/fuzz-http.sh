#!/usr/bin/env bash
# Schema-driven fuzzing of the HTTP API (`make test-fuzz`).
#
# Starts `pgferry dev` on a temporary data dir, reads the dev API key it prints, validates
# /v1/openapi.json with openapi-spec-validator and runs schemathesis against it with a
# bounded number of examples per operation. Fails on any 5xx (not_a_server_error) and on
# answers that contradict the document (status codes, content types, response schemas and
# headers), on accepted invalid input and on requests that succeed without the API key.
# One schemathesis worker: with several threads CPython 3.11 intermittently fails inside
# hypothesis (ast.parse "recursion depth mismatch"), which is not a finding about pgferry.
#
# Tunables: FUZZ_EXAMPLES (per operation, default 50), FUZZ_SEED, FUZZ_CHECKS, PGFERRY_BIN,
# FUZZ_TAGS (comma-separated OpenAPI tags: only their operations, e.g. schedules,monitors).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-fuzz"
examples="${FUZZ_EXAMPLES:-50}"
# positive_data_acceptance is left out: the schema cannot say "no U+0000 in any string of
# args" (Postgres jsonb refuses it; the server answers 400), so valid-by-schema data can be
# refused. Everything else schemathesis checks is on.
checks=not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,negative_data_rejection,unsupported_method,missing_required_header,ignored_auth
bin="${PGFERRY_BIN:-}"

# Pinned: a new schemathesis may add checks or change generation; upgrade deliberately.
tools=(schemathesis==4.32.5 openapi-spec-validator==0.9.0)
if ! "$venv/bin/pip" show -q schemathesis openapi-spec-validator >/dev/null 2>&1 \
    || ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("schemathesis") != sys.argv[1])' 4.32.5 2>/dev/null; then
    echo "fuzz: preparing $venv (${tools[*]})"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${tools[@]}"
fi

if [ -z "$bin" ]; then
    cargo build --quiet -p pgferry-cli
    bin="$(cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/pgferry"
fi

work="$(mktemp -d /tmp/pgferry-fuzz-XXXXXX)"
# As root, postgres runs as user postgres and must be able to traverse the dir.
chmod 711 "$work"
out="$work/stdout"
pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# A generous rate limit (schemathesis is the only client) and short long-polls so that
# generated wait_ms values cannot stall the run; the served document advertises them.
"$bin" dev --data-dir "$work/data" --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 \
    --rate-limit 100000 --rate-burst 100000 --max-claim-wait-ms 200 \
    >"$out" 2>"$work/stderr" &
pid=$!

base=""
for _ in $(seq 1 1200); do
    base="$(sed -n 's/^pgferry: listening http=//p' "$out")"
    [ -n "$base" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/stderr" >&2; echo "fuzz: pgferry dev exited" >&2; exit 1; }
    sleep 0.1
done
[ -n "$base" ] || { tail -20 "$work/stderr" >&2; echo "fuzz: pgferry dev did not start" >&2; exit 1; }
key="$(sed -n 's/^pgferry: dev api key=//p' "$out")"
[ -n "$key" ] || { echo "fuzz: no dev api key printed" >&2; exit 1; }
echo "fuzz: server $base"

"$venv/bin/python" - "$base/v1/openapi.json" <<'EOF'
import json, sys, urllib.request
from openapi_spec_validator import validate
doc = json.load(urllib.request.urlopen(sys.argv[1]))
validate(doc)
print(f"fuzz: openapi.json valid ({len(doc['paths'])} paths)")
EOF

seed_args=()
[ -n "${FUZZ_SEED:-}" ] && seed_args=(--seed "$FUZZ_SEED")
fuzz_tags="${FUZZ_TAGS:-}"
for tag in ${fuzz_tags//,/ }; do seed_args+=(--include-tag "$tag"); done
status=0
# schemathesis keeps state in the working directory: keep it out of the repository.
cd "$work"
"$venv/bin/schemathesis" run "$base/v1/openapi.json" \
    --url "$base" \
    -H "Authorization: Bearer $key" \
    --checks "${FUZZ_CHECKS:-$checks}" \
    --phases examples,coverage,fuzzing,stateful \
    --max-examples "$examples" \
    --workers 1 \
    --request-timeout 10 \
    --no-shrink \
    --warnings off \
    "${seed_args[@]}" || status=$?

if grep -q "request handler panicked" "$work/stderr"; then
    echo "fuzz: the server logged a panic:" >&2
    grep -A3 "request handler panicked" "$work/stderr" >&2
    status=1
fi
exit "$status"
