#!/usr/bin/env bash
# Every codec on every runtime: the codec compliance suite and the guard program (mint → open → replay
# rejected → tamper rejected, memory store) for hmac, jwe and aead on Node (Node and web builds), Bun and
# Deno (both builds) and workerd (web build); the JWE interop test with Python's jwcrypto; the web bundle
# sizes. One line per runtime × build × codec, then the size table; exits non-zero on any failure.
#
# Needs `pnpm install` and `pnpm build` first (it bundles the packages' dist). Installs what it needs:
# python3-jwcrypto (apt, as root) and the pinned runtimes of tooling/runtimes/package-lock.json (npm ci into
# a cache folder outside the repository, reused while the lock file is unchanged). Bounded: every step has
# a timeout; a warm run takes about a minute on a 2-vCPU machine, a cold one (npm ci) about 20 s more.
set -euo pipefail
shopt -s inherit_errexit 2>/dev/null || true
cd "$(dirname "$0")/.."
started=$(date +%s)
failed=0
note() { printf '\n--- %s (%ss)\n' "$*" "$(( $(date +%s) - started ))"; }

note "python3-jwcrypto (JWE interop beyond JavaScript)"
# /usr/bin/python3: Debian's packages are not visible to a pyenv python that may be first on PATH.
if ! /usr/bin/python3 -c 'import jwcrypto' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing python3-jwcrypto"
    timeout 300 apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq python3-jwcrypto >/dev/null
  else
    echo "python3-jwcrypto is missing and this is not root with apt-get: the interop test will skip (or fail with MRTR_REQUIRE_SERVICES=1)"
  fi
fi
/usr/bin/python3 -c 'import jwcrypto; print("jwcrypto", getattr(jwcrypto, "__version__", "(installed)"))' || true

note "runtimes (bun, deno, workerd from the npm registry, pinned)"
lock=tooling/runtimes/package-lock.json
cache_root="${MRTR_RUNTIMES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mrtr-runtimes}"
cache="$cache_root/$(sha256sum "$lock" | cut -c1-16)"
bin="$cache/node_modules/.bin"
if ! { [ -f "$cache/.complete" ] && "$bin/bun" --version && "$bin/deno" --version && "$bin/workerd" --version; } >/dev/null 2>&1; then
  echo "npm ci into $cache"
  rm -rf "$cache"
  mkdir -p "$cache"
  cp tooling/runtimes/package.json "$lock" "$cache/"
  # The packages' install scripts put each platform's binary in place (they come from the registry too).
  (cd "$cache" && timeout 600 npm ci --no-audit --no-fund --loglevel=error)
  touch "$cache/.complete"
fi
echo "node $(node --version), bun $("$bin/bun" --version), $("$bin/deno" --version | head -1), workerd $("$bin/workerd" --version | sed 's/^workerd //')"

if [ ! -f packages/codec-aead/dist/web/index.js ] || [ ! -f packages/test-suite/dist/index.js ] || [ ! -f packages/store-memory/dist/index.js ]; then
  note "build (dist missing)"
  timeout 900 pnpm build >/dev/null
fi

note "compliance suite + guard program: runtime × build × codec"
timeout 1200 node tooling/runtimes/run.mjs matrix "$bin" || failed=1

note "JWE interop with Python jwcrypto"
interop_log="$(mktemp)"
if (cd packages/codec-jwe && MRTR_REQUIRE_SERVICES=1 timeout 300 pnpm exec vitest run test/interop-python.test.ts) >"$interop_log" 2>&1; then
  echo "PASS  python3  jwcrypto   jwe   $(sed 's/\x1b\[[0-9;]*m//g' "$interop_log" | awk '/ Tests  /{ $1=""; print }' | sed 's/^ *//')"
else
  echo "FAIL  python3  jwcrypto   jwe"
  sed 's/\x1b\[[0-9;]*m//g' "$interop_log" | tail -40
  failed=1
fi
rm -f "$interop_log"

note "web bundle sizes (esbuild --platform=browser, conditions workerd,worker,browser; minify; gzip -9)"
timeout 300 node tooling/runtimes/run.mjs sizes || failed=1

note "runtimes done in $(( $(date +%s) - started ))s: $([ "$failed" = 0 ] && echo 'all passed' || echo 'FAILURES above')"
exit "$failed"
