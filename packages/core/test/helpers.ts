import { createHmac, timingSafeEqual } from 'node:crypto';
import type { KeyRing, ReplayStore, RequestContext, StateCodec } from '../src/index.js';
import { base64urlDecode } from '../src/entry-encoding.js';
import { KeyUnknownError, StateIntegrityError, StateMalformedError, StateTooLargeError } from '../src/entry-errors.js';

/** A minimal JSON+HMAC codec for exercising the guard (the real codecs live in their own packages). */
export function testCodec(keys: KeyRing): StateCodec {
  return {
    id: 'test',
    confidential: false,
    maxTokenBytes: 64 * 1024,
    keys,
    seal(claims) {
      const kid = keys.primaryKid;
      const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
      const tag = createHmac('sha256', keys.subkeySync(kid, 'test')!).update(`${kid}.${body}`).digest('base64url');
      return `${kid}.${body}.${tag}`;
    },
    unseal(token) {
      if (token.length > 64 * 1024) throw new StateTooLargeError();
      const [kid, body, tag, ...rest] = token.split('.');
      if (kid === undefined || body === undefined || tag === undefined || rest.length > 0) throw new StateMalformedError();
      const key = keys.subkeySync(kid, 'test');
      if (key === undefined) throw new KeyUnknownError();
      const got = base64urlDecode(tag);
      const want = createHmac('sha256', key).update(`${kid}.${body}`).digest();
      if (got === undefined || got.length !== 32 || !timingSafeEqual(got, want)) throw new StateIntegrityError();
      return { claims: JSON.parse(Buffer.from(body, 'base64url').toString()), kid };
    },
  };
}

/** A correct in-process store with an outage switch. */
export function testStore(now: () => number): ReplayStore & { down: boolean } {
  const seen = new Map<string, number>();
  return {
    capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
    down: false,
    async consume(id, expiresAtMs) {
      if (this.down) throw new Error('connection refused');
      const until = seen.get(id);
      if (until !== undefined && until >= now()) return false;
      seen.set(id, expiresAtMs);
      return true;
    },
    async close() {},
  };
}

export interface FakeClock {
  now: () => number;
  advance: (ms: number) => void;
  set: (v: number) => void;
}

export function fakeClock(start = 1_800_000_000_000): FakeClock {
  let t = start;
  return { now: () => t, advance: (ms: number) => void (t += ms), set: (v: number) => void (t = v) };
}

/** A `tools/call` request context (alice deleting /tmp/a), with `over` applied. */
export const req = (over: Partial<RequestContext> = {}): RequestContext => ({
  method: 'tools/call',
  target: 'delete_files',
  arguments: { paths: ['/tmp/a'] },
  principal: 'alice',
  ...over,
});
