import { createHash, randomBytes } from 'node:crypto';
import type { JsonValue } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';

/** The payload sizes the codec bench runs: the "small" (400 B, see below) and exactly 4 KiB. */
export type PayloadName = 'small' | '4k';
export const PAYLOADS: readonly PayloadName[] = ['small', '4k'];
/**
 * baselines.md's 300 B resume context mapped onto `StateClaims`: principal → `sub` (a 128-bit tag),
 * method/tool/paramsDigest → `req`, plus the fields the baseline payload lacks (`aud`, `flow`). The
 * envelope alone is 323 B of JSON with `data: {}`, so ~300 B cannot be reached without shrinking
 * protocol fields; the smallest faithful mapping (one path in `data.args.paths`) is 400 B.
 */
const TARGET_JSON_BYTES: Record<PayloadName, number> = { small: 400, '4k': 4096 };

const b64u = (bytes: Uint8Array): string => Buffer.from(bytes).toString('base64url');

/**
 * Claims shaped like core's `StateClaims`, carrying the resume context of baselines.md (a
 * `delete_files` confirmation round). `exp` is now + 3 h so every token stays valid for the whole
 * run. The JSON is fitted to exactly 400 B (small) or 4096 B (4k, which adds `data.pad`, an array
 * of path-like strings) by adjusting the last path.
 */
export function makeClaims(name: PayloadName, nowMs = Date.now()): StateClaims {
  const target = TARGET_JSON_BYTES[name];
  const paths = ['/srv/app/tmp/cache-1'];
  const data: { [key: string]: JsonValue } = {
    args: { paths },
    step: 1,
    answers: { confirm: true },
  };
  const pad: string[] = [];
  if (name === '4k') data['pad'] = pad;
  const claims: StateClaims = {
    v: 1,
    iat: nowMs,
    exp: nowMs + 3 * 3600_000,
    jti: b64u(randomBytes(16)),
    aud: 'https://mcp.example.com/mcp',
    sub: b64u(randomBytes(16)),
    req: {
      m: 'tools/call',
      t: 'delete_files',
      d: b64u(createHash('sha256').update('{"paths":["/srv/app/tmp/cache-1"]}').digest()),
    },
    flow: { id: b64u(randomBytes(16)), round: 1, deadline: nowMs + 3 * 3600_000 },
    data,
  };
  const size = (): number => Buffer.byteLength(JSON.stringify(claims));
  // Grow with whole path-like entries, then fit the last entry to the exact size.
  const list = name === '4k' ? pad : paths;
  let i = 0;
  while (size() + 40 < target) list.push(`/srv/app/data/project-${String(i++).padStart(4, '0')}/build/artifact.bin`);
  const last = list.length - 1;
  const missing = target - size();
  if (missing < 0) {
    list[last] = list[last]!.slice(0, list[last]!.length + missing);
  } else if (missing > 0) {
    list[last] = list[last] + 'x'.repeat(missing);
  }
  const bytes = size();
  if (bytes !== target) throw new Error(`payload ${name}: expected ${target} B of JSON, got ${bytes}`);
  return claims;
}
