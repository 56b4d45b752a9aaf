import { cryptoProvider } from '#crypto';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import { CLAIMS_VERSION, type StateClaims } from '../claims.js';
import { IdempotencyKeyConflictError, MrtrError, QuotaExceededError } from '../errors.js';
import { bindingIn, type Scope } from './scope.js';
import type { OpenedState } from './types.js';
import { canonicalJson, utf8Encode } from '../util/json.js';
import type { GuardContext } from './context.js';
import type { Principal } from './principal.js';

/** Characters of an idempotency key: 1 to {@link MAX_IDEMPOTENCY_KEY_CHARS} of printable ASCII (no space). */
export const IDEMPOTENCY_KEY_PATTERN: RegExp = /^[\x21-\x7e]{1,255}$/;
/** Longest idempotency key, in characters. */
export const MAX_IDEMPOTENCY_KEY_CHARS = 255;
/** Shortest key lifetime, ms. */
export const MIN_KEY_TTL_MS = 1_000;

const KEY_PURPOSE = 'mrtr/idempotency-key/v1';

/** Whether `key` is a well-formed idempotency key (see {@link IDEMPOTENCY_KEY_PATTERN}). */
export const isIdempotencyKey = (key: unknown): key is string => typeof key === 'string' && IDEMPOTENCY_KEY_PATTERN.test(key);

/** A keyed call as the ledger sees it: a state never sealed or sent, and the principal's tag for this instance's bounds. */
export interface KeyState {
  readonly state: OpenedState;
  readonly holder: string;
  /** What the claim fingerprints: the digest of the call's canonical arguments. */
  readonly answers: string;
}

/** The key lifetime asked for, checked against the guard's: `RangeError` outside [1 s, the guard's `ttlMs`]. */
export function keyTtlMs(label: string, ttlMs: unknown, max: number): number {
  if (ttlMs === undefined) return max;
  if (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs)) throw new TypeError(`${label}: ttlMs must be an integer`);
  if (ttlMs < MIN_KEY_TTL_MS || ttlMs > max) throw new RangeError(`${label}: ttlMs must be ${MIN_KEY_TTL_MS}-${max} (the guard's ttlMs)`);
  return ttlMs;
}

/**
 * The state a keyed first-round call is claimed under: its id (`jti`) is an HMAC, under the primary key's
 * idempotency subkey, of the principal tag, the method, the target and the key (never the key itself), so
 * (principal, tool, key) names one ledger entry; it lives `ttlMs`; the claim fingerprints the arguments' digest.
 * Each keyed call counts as a mint against the principal's mint quota (retries too: bounded before the store is asked).
 */
export function createKeyState(ctx: GuardContext): (scope: Scope, key: string, ttlMs: number | undefined) => Awaitable<KeyState> {
  const { current, audience, quota, now, principalTag, whoIn, holderTag, ledgerEpoch, clock } = ctx;
  // Each step runs now when its inputs are plain values (Node's crypto, a known epoch, remembered tags): a keyed call
  // awaits nothing of its own before the store, as a round does not.
  const build = (scope: Scope, key: string, lifetime: number, principal: Principal): Awaitable<KeyState> => {
    const kid = current().ring.primaryKid;
    return andThen(principalTag(kid, principal), (sub) =>
      andThen(bindingIn(scope), (req) =>
        andThen(holderTag(principal), (holder) => {
          const t = now();
          if (quota !== undefined && !quota.take(holder, t)) throw new QuotaExceededError();
          const subkey = current().ring.subkey(kid, KEY_PURPOSE);
          if (subkey === undefined) throw new MrtrError('ERR_KEY_UNKNOWN');
          return andThen(subkey, (k) =>
            andThen(cryptoProvider.hmacSha256(k, utf8Encode(canonicalJson([sub, req.m, req.t, key]))), (mac) => {
              const jti = cryptoProvider.base64urlEncode(mac.subarray(0, 16));
              const exp = t + lifetime;
              const claims: StateClaims = {
                v: CLAIMS_VERSION,
                iat: t,
                exp,
                jti,
                aud: audience,
                sub,
                req,
                flow: { id: jti, round: 1, deadline: exp },
                data: null,
              };
              const le = ledgerEpoch.value;
              if (le !== undefined) claims.le = le;
              return { state: { claims, data: null, flow: claims.flow, kid }, holder, answers: req.d };
            }),
          );
        }),
      ),
    );
  };
  return (scope, key, ttlMs) => {
    clock.assertWithin();
    if (!isIdempotencyKey(key)) throw new TypeError('GuardRequest.claimKey: key must be 1-255 characters of printable ASCII');
    const lifetime = keyTtlMs('GuardRequest.claimKey', ttlMs, ctx.ttlMs);
    const principal = whoIn(scope);
    return andThen(ledgerEpoch.ready(), () => build(scope, key, lifetime, principal));
  };
}

/** A keyed claim's refusal: the id held with another fingerprint, or its outcome not kept, is the key's conflict. */
export const keyRefusal = (error: unknown): never => {
  throw MrtrError.is(error) && error.code === 'ERR_STATE_REPLAYED' ? new IdempotencyKeyConflictError({ cause: error }) : error;
};
