import { createCipheriv, createDecipheriv, createHmac, createSecretKey, randomBytes, randomFillSync, timingSafeEqual } from 'node:crypto';
import { createRequestStateCodec } from '@modelcontextprotocol/server';
import { KeyRing, MrtrError, type StateCodec } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { canonicalJson } from '@mrtr/core/encoding';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { CompactEncrypt, compactDecrypt } from 'jose';
import { pack, unpack } from 'msgpackr';
import type { Job } from './harness.js';
import { loadFunction } from './load.js';
import { makeClaims, PAYLOADS, type PayloadName } from './payload.js';

export type CodecFamily = 'hmac' | 'jwe' | 'aead';

export interface CodecRow {
  /** Short id used in job keys and tables (B, SDK, hmac, C, C-pool, jose, jwe, E, E-pool, aead). */
  id: string;
  label: string;
  family: CodecFamily;
  kind: 'bare' | 'library' | 'mrtr';
  confidential: boolean;
  /** JS object → token string (may return a promise). */
  seal(claims: StateClaims): unknown;
  /** Token → verified claims, including an `exp` check (may return a promise). */
  open(token: string): unknown;
  /** Seals claims that are already expired (for the expiry check); defaults to `seal` with a past `exp`. */
  sealExpired?(claims: StateClaims): unknown;
  /** The `@mrtr` codec behind the row (mrtr rows only). */
  codec?: StateCodec;
  /** True when the row is timed rejecting a 1 MiB token (mrtr codecs, and the SDK for reference). */
  rejectLarge: boolean;
}

export interface SkippedRow {
  id: string;
  label: string;
  reason: string;
}

export const MIB = 1024 * 1024;

const isThenable = (v: unknown): v is PromiseLike<unknown> =>
  v !== null && typeof v === 'object' && typeof (v as { then?: unknown }).then === 'function';

class ExpiredError extends Error {}
function notExpired(claims: StateClaims): StateClaims {
  if (!(claims.exp > Date.now())) throw new ExpiredError('expired');
  return claims;
}

/** CSPRNG bytes from a 4 KiB buffer refilled with `randomFillSync` (baselines.md C-pool). */
function makeRandomPool(size = 4096): (n: number) => Buffer {
  let pool = Buffer.alloc(0);
  let offset = size;
  return (n) => {
    if (offset + n > pool.length) {
      pool = randomFillSync(Buffer.allocUnsafe(size));
      offset = 0;
    }
    const out = Buffer.allocUnsafe(n);
    pool.copy(out, 0, offset, offset + n);
    offset += n;
    return out;
  };
}

/** B: base64url(JSON) "." base64url(HMAC-SHA256(body)), compared with `timingSafeEqual`. */
/** B: the bare HMAC every HMAC row is compared with (also the guard bench's reference). */
export function bareHmac(): CodecRow {
  const key = createSecretKey(randomBytes(32));
  return {
    id: 'B',
    label: 'bare node:crypto HMAC-SHA256 over base64url(JSON)',
    family: 'hmac',
    kind: 'bare',
    confidential: false,
    rejectLarge: false,
    seal(claims) {
      const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
      return `${body}.${createHmac('sha256', key).update(body).digest('base64url')}`;
    },
    open(token) {
      const dot = token.lastIndexOf('.');
      if (dot <= 0) throw new Error('malformed');
      const body = token.slice(0, dot);
      const mac = Buffer.from(token.slice(dot + 1), 'base64url');
      const expected = createHmac('sha256', key).update(body).digest();
      if (mac.length !== expected.length || !timingSafeEqual(mac, expected)) throw new Error('mac');
      return notExpired(JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as StateClaims);
    },
  };
}

/** C / C-pool: iv | AES-256-GCM(JSON) | tag, base64url; C draws `randomBytes(12)` per seal, C-pool a pooled IV. */
function bareGcm(pooled: boolean): CodecRow {
  const key = createSecretKey(randomBytes(32));
  const iv = pooled ? makeRandomPool() : (n: number) => randomBytes(n);
  return {
    id: pooled ? 'C-pool' : 'C',
    label: pooled ? 'bare node:crypto AES-256-GCM, pooled IV' : 'bare node:crypto AES-256-GCM, randomBytes(12) IV',
    family: 'jwe',
    kind: 'bare',
    confidential: true,
    rejectLarge: false,
    seal(claims) {
      const nonce = iv(12);
      const cipher = createCipheriv('aes-256-gcm', key, nonce);
      const ct = Buffer.concat([cipher.update(JSON.stringify(claims), 'utf8'), cipher.final()]);
      return Buffer.concat([nonce, ct, cipher.getAuthTag()]).toString('base64url');
    },
    open(token) {
      const buf = Buffer.from(token, 'base64url');
      if (buf.length < 28) throw new Error('malformed');
      const decipher = createDecipheriv('aes-256-gcm', key, buf.subarray(0, 12));
      decipher.setAuthTag(buf.subarray(buf.length - 16));
      const pt = Buffer.concat([decipher.update(buf.subarray(12, buf.length - 16)), decipher.final()]);
      return notExpired(JSON.parse(pt.toString('utf8')) as StateClaims);
    },
  };
}

/** E / E-pool: nonce | XChaCha20-Poly1305(msgpack), base64url; E draws `randomBytes(24)` per seal, E-pool a pooled nonce. */
function bareXchacha(pooled: boolean): CodecRow {
  const key = new Uint8Array(randomBytes(32));
  const nonceOf = pooled ? makeRandomPool() : (n: number) => randomBytes(n);
  return {
    id: pooled ? 'E-pool' : 'E',
    label: pooled
      ? 'bare msgpackr + @noble xchacha20poly1305, pooled nonce'
      : 'bare msgpackr + @noble xchacha20poly1305, randomBytes(24) nonce',
    family: 'aead',
    kind: 'bare',
    confidential: true,
    rejectLarge: false,
    seal(claims) {
      const nonce = nonceOf(24);
      const ct = xchacha20poly1305(key, nonce).encrypt(pack(claims));
      return Buffer.concat([nonce, ct]).toString('base64url');
    },
    open(token) {
      const buf = Buffer.from(token, 'base64url');
      if (buf.length < 40) throw new Error('malformed');
      const pt = xchacha20poly1305(key, buf.subarray(0, 24)).decrypt(buf.subarray(24));
      return notExpired(unpack(pt) as StateClaims);
    },
  };
}

/** jose 6 CompactEncrypt / compactDecrypt, dir + A256GCM, with a pre-imported CryptoKey. */
async function joseJwe(): Promise<CodecRow> {
  const key = await crypto.subtle.importKey('raw', randomBytes(32), 'AES-GCM', false, ['encrypt', 'decrypt']);
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  const options = { keyManagementAlgorithms: ['dir'], contentEncryptionAlgorithms: ['A256GCM'] };
  return {
    id: 'jose',
    label: 'jose CompactEncrypt/compactDecrypt dir+A256GCM, CryptoKey',
    family: 'jwe',
    kind: 'library',
    confidential: true,
    rejectLarge: false,
    seal(claims) {
      return new CompactEncrypt(encoder.encode(JSON.stringify(claims)))
        .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid: 'k1' })
        .encrypt(key);
    },
    async open(token) {
      const { plaintext } = await compactDecrypt(token, key, options);
      return notExpired(JSON.parse(decoder.decode(plaintext)) as StateClaims);
    },
  };
}

/** The SDK's opt-in codec (`@modelcontextprotocol/server` 2.4.0): WebCrypto HMAC, `mint`/`verify`. */
function sdkCodec(): CodecRow {
  const key = randomBytes(32);
  const sdk = createRequestStateCodec<StateClaims>({ key, ttlSeconds: 3 * 3600 });
  const expiredSdk = createRequestStateCodec<StateClaims>({ key, ttlSeconds: -60 });
  // No `bind` callback is configured, so verify never reads its context.
  const ctx = {} as Parameters<typeof sdk.verify>[1];
  return {
    id: 'SDK',
    label: 'SDK createRequestStateCodec (mint/verify)',
    family: 'hmac',
    kind: 'library',
    confidential: false,
    rejectLarge: true,
    seal: (claims) => sdk.mint(claims),
    open: (token) => sdk.verify(token, ctx),
    sealExpired: (claims) => expiredSdk.mint(claims),
  };
}

/** What each codec package exports: `createXCodec(keys, options?)`. */
type CodecFactory = (keys: KeyRing) => StateCodec;

const MRTR_CODECS: readonly { id: string; family: CodecFamily; specifier: string; factory: string }[] = [
  { id: 'hmac', family: 'hmac', specifier: '@mrtr/codec-hmac', factory: 'createHmacCodec' },
  { id: 'jwe', family: 'jwe', specifier: '@mrtr/codec-jwe', factory: 'createJweCodec' },
  { id: 'aead', family: 'aead', specifier: '@mrtr/codec-aead', factory: 'createAeadCodec' },
];

function mrtrRow(id: string, family: CodecFamily, specifier: string, codec: StateCodec): CodecRow {
  return {
    id,
    label: `${specifier} (${codec.id})`,
    family,
    kind: 'mrtr',
    confidential: codec.confidential,
    codec,
    rejectLarge: true,
    seal: (claims) => codec.seal(claims),
    open(token) {
      const opened = codec.unseal(token);
      return isThenable(opened) ? opened.then((o) => notExpired(o.claims)) : notExpired(opened.claims);
    },
  };
}

export interface CodecSetup {
  rows: CodecRow[];
  skipped: SkippedRow[];
  /** The key ring the mrtr codecs were built with (one 32-byte key, kid `k1`). */
  keys: KeyRing;
  /** Builds a second instance of an mrtr codec over another ring (wrong-key check). */
  rebuild: Map<string, (keys: KeyRing) => StateCodec>;
}

/** Every row of the codec bench, in table order; mrtr codecs that cannot be loaded are skipped. */
export async function setupCodecs(): Promise<CodecSetup> {
  const keys = new KeyRing([{ kid: 'k1', secret: new Uint8Array(randomBytes(32)) }]);
  const skipped: SkippedRow[] = [];
  const mrtr = new Map<string, CodecRow>();
  const rebuild = new Map<string, (keys: KeyRing) => StateCodec>();
  for (const spec of MRTR_CODECS) {
    const loaded = await loadFunction<CodecFactory>(spec.specifier, spec.factory);
    if (!loaded.ok) {
      skipped.push({ id: spec.id, label: spec.specifier, reason: loaded.reason });
      continue;
    }
    const factory = loaded.value;
    try {
      mrtr.set(spec.id, mrtrRow(spec.id, spec.family, spec.specifier, factory(keys)));
      rebuild.set(spec.id, (other) => factory(other));
    } catch (error) {
      skipped.push({ id: spec.id, label: spec.specifier, reason: `construction failed: ${String(error)}` });
    }
  }
  const rows: CodecRow[] = [bareHmac(), sdkCodec()];
  if (mrtr.has('hmac')) rows.push(mrtr.get('hmac')!);
  rows.push(bareGcm(false), bareGcm(true), await joseJwe());
  if (mrtr.has('jwe')) rows.push(mrtr.get('jwe')!);
  rows.push(bareXchacha(false), bareXchacha(true));
  if (mrtr.has('aead')) rows.push(mrtr.get('aead')!);
  return { rows, skipped, keys, rebuild };
}

// ---------------------------------------------------------------------------------------------
// Correctness checks, run before anything is timed. Any failure aborts the bench.

export class CheckFailure extends Error {}

const fail = (row: CodecRow, what: string): never => {
  throw new CheckFailure(`codec ${row.id} (${row.label}): ${what}`);
};

async function settle(fn: () => unknown): Promise<{ ok: true; value: unknown } | { ok: false; error: unknown }> {
  try {
    return { ok: true, value: await fn() };
  } catch (error) {
    return { ok: false, error };
  }
}

/** Indexes to flip: inside a segment, never a segment's last character (its spare bits may be ignored). */
function tamperIndexes(token: string): number[] {
  const picks = new Set<number>();
  for (const start of [4, token.length >> 1, token.length - 5]) {
    let i = Math.min(Math.max(start, 0), token.length - 2);
    while (i > 0 && (token[i] === '.' || token[i + 1] === '.' || i === token.length - 1)) i--;
    if (token[i] !== '.') picks.add(i);
  }
  return [...picks];
}

const flip = (token: string, i: number): string => token.slice(0, i) + (token[i] === 'A' ? 'B' : 'A') + token.slice(i + 1);

/** A 1 MiB string that starts and ends like `token` (so it looks like one of its tokens), filled with base64url. */
export function largeToken(token: string): string {
  const half = token.length >> 1;
  return token.slice(0, half) + 'A'.repeat(MIB - token.length) + token.slice(half);
}

const PAYLOAD_MARKERS = ['delete_files', '/srv/app/tmp/cache'];

function leaksPayload(token: string): boolean {
  for (const segment of token.split('.')) {
    const bytes = Buffer.from(segment, 'base64url').toString('latin1');
    if (PAYLOAD_MARKERS.some((m) => bytes.includes(m) || segment.includes(m))) return true;
  }
  return false;
}

export interface CodecCheckReport {
  /** Token length in bytes per row and payload. */
  tokenBytes: Record<string, Record<PayloadName, number>>;
  /** A valid small token per row (what the open jobs open). */
  tokens: Record<string, Record<PayloadName, string>>;
  checks: string[];
}

/**
 * Round trip of every payload, rejection of three single-character flips, rejection of an expired
 * token; for confidential rows: two seals differ and no payload text shows; for mrtr codecs: a
 * different key with the same kid is refused with a `MrtrError` and a 1 MiB token with
 * `ERR_STATE_TOO_LARGE`.
 */
export async function checkCodecs(setup: CodecSetup, claimsByPayload: Record<PayloadName, StateClaims>): Promise<CodecCheckReport> {
  const report: CodecCheckReport = { tokenBytes: {}, tokens: {}, checks: [] };
  for (const row of setup.rows) {
    const tokens = {} as Record<PayloadName, string>;
    const bytes = {} as Record<PayloadName, number>;
    for (const name of PAYLOADS) {
      const claims = claimsByPayload[name];
      const sealed = await settle(() => row.seal(claims));
      if (!sealed.ok) fail(row, `seal(${name}) threw ${String(sealed.error)}`);
      const token = (sealed as { value: unknown }).value;
      if (typeof token !== 'string' || token.length === 0) return fail(row, `seal(${name}) did not return a string`);
      const opened = await settle(() => row.open(token));
      if (!opened.ok) fail(row, `open(seal(${name})) threw ${String((opened as { error: unknown }).error)}`);
      if (canonicalJson((opened as { value: unknown }).value) !== canonicalJson(claims))
        fail(row, `round trip of ${name} changed the claims`);
      for (const i of tamperIndexes(token)) {
        const tampered = await settle(() => row.open(flip(token, i)));
        if (tampered.ok) fail(row, `accepted ${name} token with character ${i} flipped`);
      }
      if (row.confidential) {
        const again = await settle(() => row.seal(claims));
        if (!again.ok || again.value === token) fail(row, `two seals of ${name} are identical`);
        if (leaksPayload(token)) fail(row, `payload text visible in ${name} token`);
      }
      tokens[name] = token;
      bytes[name] = Buffer.byteLength(token);
    }
    const now = Date.now();
    const expiredClaims = { ...claimsByPayload.small, exp: now - 60_000, flow: { ...claimsByPayload.small.flow, deadline: now - 60_000 } };
    const expiredToken = await settle(() => (row.sealExpired ?? row.seal)(expiredClaims));
    if (!expiredToken.ok) fail(row, 'sealing expired claims threw');
    const expiredOpen = await settle(() => row.open((expiredToken as { value: string }).value));
    if (expiredOpen.ok) fail(row, 'accepted an expired token');
    if (row.codec !== undefined) {
      const other = setup.rebuild.get(row.id)!(new KeyRing([{ kid: 'k1', secret: new Uint8Array(randomBytes(32)) }]));
      const wrong = await settle(() => other.unseal(tokens.small));
      if (wrong.ok || !MrtrError.is((wrong as { error: unknown }).error))
        fail(row, 'a different key with the same kid did not fail with a MrtrError');
      const big = await settle(() => row.codec!.unseal(largeToken(tokens.small)));
      const code = big.ok ? undefined : (big.error as { code?: unknown }).code;
      if (code !== 'ERR_STATE_TOO_LARGE')
        fail(row, `a 1 MiB token was not refused with ERR_STATE_TOO_LARGE (got ${big.ok ? 'success' : String(code)})`);
    }
    report.tokens[row.id] = tokens;
    report.tokenBytes[row.id] = bytes;
    report.checks.push(
      `${row.id}: round trip small+4k, ${tamperIndexes(tokens.small).length} flips rejected, expired rejected` +
        (row.confidential ? ', seals differ, payload hidden' : '') +
        (row.codec !== undefined ? ', wrong key rejected, 1 MiB → ERR_STATE_TOO_LARGE' : ''),
    );
  }
  return report;
}

// ---------------------------------------------------------------------------------------------
// Jobs

/** Seal and open of every row at every payload, plus the 1 MiB reject jobs. */
export function codecJobs(setup: CodecSetup, claimsByPayload: Record<PayloadName, StateClaims>, report: CodecCheckReport): Job[] {
  const jobs: Job[] = [];
  for (const name of PAYLOADS) {
    const claims = claimsByPayload[name];
    for (const row of setup.rows) {
      const token = report.tokens[row.id]![name];
      jobs.push({ key: `codec|${row.id}|seal|${name}`, op: () => row.seal(claims) });
      jobs.push({ key: `codec|${row.id}|open|${name}`, op: () => row.open(token) });
    }
  }
  for (const row of setup.rows) {
    if (!row.rejectLarge) continue;
    const big = largeToken(report.tokens[row.id]!.small);
    const open = row.codec !== undefined ? (t: string) => row.codec!.unseal(t) : (t: string) => row.open(t);
    const expected = (error: unknown): void => {
      // mrtr codecs must refuse with ERR_STATE_TOO_LARGE; the SDK (reference row) with anything.
      if (row.codec !== undefined && (error as { code?: unknown }).code !== 'ERR_STATE_TOO_LARGE') throw error;
    };
    const accepted = (): never => {
      throw new CheckFailure(`codec ${row.id} accepted a 1 MiB token`);
    };
    jobs.push({
      key: `reject|${row.id}|open|1MiB`,
      // One call can take milliseconds for codecs that decode first; allow bigger samples.
      batchMs: 5,
      op: () => {
        try {
          const r = open(big);
          if (isThenable(r)) return r.then(accepted, expected);
          return accepted();
        } catch (error) {
          return expected(error);
        }
      },
    });
  }
  return jobs;
}

export function makePayloads(): Record<PayloadName, StateClaims> {
  const now = Date.now();
  return { small: makeClaims('small', now), '4k': makeClaims('4k', now) };
}
