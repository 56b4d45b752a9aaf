#!/usr/bin/env bash
# The deploy examples as a user runs them (issue 45), after `pnpm build`:
# 1. each example's `pnpm --filter <example> smoke`: its `dev` started exactly as documented (wrangler dev under
#    Node 22 from npm; next dev with the Upstash REST shim in front of REDIS_URL; the Lambda handler behind the local
#    API Gateway HTTP API event server with dynalite) on free ports on 127.0.0.1, driven by the official MCP client
#    (input_required, the answer, an identical retry marked replayed, a replay refused), then every process stopped;
# 2. the Lambda example copied out of the repository (scripts/eject-example.mjs) against tarballs packed from the
#    workspace, installed with npm from nothing but those tarballs and the registry, type-checked, bundled, and
#    smoke-tested there too.
# Each part is bounded (the smokes stop themselves, `timeout` around everything); 66 s in all at load average 8, 110 s at 29 (2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

for example in aws-lambda vercel-next cloudflare-worker; do
  echo "--- smoke: examples/$example"
  timeout --kill-after=10 300 pnpm --filter "@mrtr/example-$example" smoke
done

echo "--- eject: examples/aws-lambda copied out, built against packed tarballs"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
node scripts/eject-example.mjs aws-lambda "$scratch/app" --tarballs "$scratch/tarballs" --pack
(
  cd "$scratch/app"
  # Only the copy's own package.json: no workspace above it, no pnpm settings leaking in.
  for key in $(env | sed -n 's/^\(npm_[A-Za-z_]*\)=.*/\1/p'); do unset "$key"; done
  timeout 300 npm install --no-audit --no-fund --loglevel=error
  if grep -rq 'workspace:' package.json; then echo "the copy still has workspace: ranges"; exit 1; fi
  npm run typecheck
  npm run build
  timeout --kill-after=10 120 npm run smoke
)
echo "examples: done in $(( $(date +%s) - started ))s"
