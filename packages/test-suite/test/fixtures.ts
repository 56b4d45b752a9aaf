import { createHmac, timingSafeEqual } from 'node:crypto';
import {
  type KeyRing,
  KeyUnknownError,
  type ReplayStore,
  type StateCodec,
  StateIntegrityError,
  StateMalformedError,
  StateTooLargeError,
  StoreUnavailableError,
  assertStateClaims,
  isCanonicalBase64url,
} from '@mrtr/core';
import type { TestFn } from '../src/index.js';

export interface CollectedTest {
  name: string;
  fn: () => Promise<void> | void;
}

/** Collects the tests a suite registers, so a test can run them and look at the outcome. */
export function collect(register: (it: TestFn) => void): CollectedTest[] {
  const tests: CollectedTest[] = [];
  register((name, fn) => tests.push({ name, fn }));
  return tests;
}

export async function runCollected(tests: CollectedTest[]): Promise<{ passed: string[]; failed: string[] }> {
  const passed: string[] = [];
  const failed: string[] = [];
  for (const t of tests) {
    try {
      await t.fn();
      passed.push(t.name);
    } catch {
      failed.push(t.name);
    }
  }
  return { passed, failed };
}

export interface ReferenceCodecFlaws {
  noMac?: boolean;
  ignoresTrailing?: boolean;
  lenientBase64?: boolean;
  noSizeCap?: boolean;
  throwsPlainErrors?: boolean;
}

/** A small, correct HMAC codec (and, with flaws, deliberately broken ones) to show the suite bites. */
export function referenceCodec(keys: KeyRing, flaws: ReferenceCodecFlaws = {}): StateCodec {
  const maxTokenBytes = 8192;
  const keyFor = (kid: string) => keys.subkeySync(kid, 'test/reference');
  const mac = (key: Uint8Array, text: string) => createHmac('sha256', key).update(text).digest();
  const decode = (text: string) => {
    if (!flaws.lenientBase64 && !isCanonicalBase64url(text)) return undefined;
    return Buffer.from(text, 'base64url');
  };
  return {
    id: 'reference',
    confidential: false,
    maxTokenBytes,
    seal(claims) {
      const kid = keys.primaryKid;
      const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
      const signed = `r1.${kid}.${body}`;
      const tag = flaws.noMac ? 'nomac' : mac(keyFor(kid)!, signed).toString('base64url');
      return `r1.${kid}.${body}.${tag}`;
    },
    open(token) {
      if (typeof token !== 'string') throw new StateMalformedError();
      if (!flaws.noSizeCap && token.length > maxTokenBytes) throw new StateTooLargeError();
      const parts = token.split('.');
      if (flaws.ignoresTrailing) parts.length = Math.min(parts.length, 4);
      if (parts.length !== 4 || parts[0] !== 'r1') {
        if (flaws.throwsPlainErrors) throw new Error('bad token');
        throw new StateMalformedError();
      }
      const [, kid, body, tag] = parts as [string, string, string, string];
      const key = keyFor(kid);
      if (key === undefined) throw new KeyUnknownError();
      if (!flaws.noMac) {
        const got = decode(tag);
        const signed = `r1.${kid}.${body}`;
        const want = mac(key, signed);
        if (got === undefined || got.length !== want.length || !timingSafeEqual(got, want)) throw new StateIntegrityError();
      }
      const bytes = decode(body);
      if (bytes === undefined) throw new StateMalformedError();
      let claims: unknown;
      try {
        claims = JSON.parse(bytes.toString('utf8'));
      } catch (cause) {
        throw new StateMalformedError({ cause });
      }
      assertStateClaims(claims);
      return { claims, kid };
    },
  };
}

/** A correct in-process store and a broken get-then-set one. */
export function referenceStore(options: { getThenSet?: boolean; now?: () => number } = {}): ReplayStore {
  const seen = new Map<string, number>();
  const now = options.now ?? Date.now;
  let closed = false;
  return {
    async consume(id, expiresAtMs) {
      if (typeof id !== 'string' || id.length === 0) throw new TypeError('id must be a non-empty string');
      if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) throw new TypeError('expiresAtMs must be finite');
      if (closed) throw new StoreUnavailableError();
      const existing = seen.get(id);
      const used = existing !== undefined && existing >= now();
      if (options.getThenSet) {
        // The classic bug: the check and the write are two steps with a gap between them.
        await new Promise((resolve) => setImmediate(resolve));
      }
      if (used && !options.getThenSet) return false;
      if (options.getThenSet && used) return false;
      seen.set(id, expiresAtMs);
      return true;
    },
    async close() {
      closed = true;
    },
  };
}
