#!/usr/bin/env bash
# Demo-server checks run by .ci/run after build and tests: the official conformance suite against the built
# mrtr-demo (14 MRTR scenarios per codec/store, and the full 2026-07-28 requirement set), then the bounded
# load test. Needs REDIS_URL and DATABASE_URL (with MRTR_REQUIRE_SERVICES=1 a missing one fails).
set -euo pipefail
cd "$(dirname "$0")/.."
npx tsup --silent
node scripts/conformance.mjs
# Warm-up 20 s: the replay ledger (and its recorded outcomes) fills for a state lifetime, ttl 5 s + 2 × 5 s skew,
# before it is steady; memory is compared from then on.
node scripts/load.mjs --duration 45 --warmup 20 --concurrency 32
