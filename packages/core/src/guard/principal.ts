import { cryptoProvider } from '#crypto';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import { KeyUnknownError, PrincipalRequiredError } from '../errors.js';
import { canonicalJson, utf8Encode } from '../util/json.js';
import { generateKey, KeyRing } from '../keys/keys.js';

/**
 * A principal as a namespaced identity: `p` authenticated, `u` the fixed unauthenticated one; they never collide.
 * What {@link principalPolicy} resolves, once per request: an adapter that resolves it itself hands the guard this
 * value (`RequestContext.resolvedPrincipal`), never a name to resolve again.
 */
export type Principal = readonly [namespace: 'p' | 'u', name: string];

const PRINCIPAL_PURPOSE = 'mrtr/principal-tag/v1';
/** Principal tags remembered per guard (the oldest is dropped first): a bound whatever principals a server sees. */
const PRINCIPAL_TAGS_CACHED = 1024;
/** Principals longer than this are tagged on every call, never remembered (bounds the cache's memory). */
const PRINCIPAL_TAG_CACHE_MAX_CHARS = 256;

/**
 * The principal policy: reads the principal of a request and applies `unauthenticated` (`'reject'` throws
 * `ERR_PRINCIPAL_REQUIRED`; `{ principal }` gives requests without one a fixed identity in a namespace of its own).
 * No name is `undefined` or `''`; anything else but a string (`null` included) is a bug of the server's
 * `principal()` and throws a `TypeError` labelled with `label` (the option's owner).
 */
export function principalPolicy<R>(
  readPrincipal: (request: R) => string | undefined,
  unauthenticated: 'reject' | { principal: string },
  label = 'createStateGuard',
): (request: R) => Principal {
  return (request) => {
    const principal: unknown = readPrincipal(request);
    if (principal === undefined || principal === '') {
      if (unauthenticated === 'reject') throw new PrincipalRequiredError();
      return ['u', unauthenticated.principal];
    }
    if (typeof principal !== 'string') throw new TypeError(`${label}: principal() must return a string`);
    return ['p', principal];
  };
}

/**
 * A principal resolved elsewhere (`RequestContext.resolvedPrincipal`), checked against the policy it must come
 * from: `['p', name]` with a non-empty name, or `['u', name]` when `unauthenticated` fixes that very name. Anything
 * else (another fixed principal, one under `'reject'`, not a principal at all) is a `TypeError` labelled `label`.
 */
export function checkResolvedPrincipal(
  unauthenticated: 'reject' | { principal: string },
  label = 'createStateGuard',
): (principal: unknown) => Principal {
  const fixed = unauthenticated === 'reject' ? undefined : unauthenticated.principal;
  return (principal) => {
    if (Array.isArray(principal) && principal.length === 2) {
      const [namespace, name] = principal as unknown[];
      if (namespace === 'p' ? typeof name === 'string' && name !== '' : namespace === 'u' && fixed !== undefined && name === fixed) {
        return principal as unknown as Principal;
      }
    }
    throw new TypeError(`${label}: request.resolvedPrincipal must be ['p', name] or this guard's fixed ['u', principal]`);
  };
}

/**
 * The principal tag sealed in `sub`: base64url of the first 16 bytes of HMAC-SHA256 under the ring's
 * principal-tag subkey of key `kid`, over (audience, namespace, name).
 *
 * principal → { kid, namespace, tag } is remembered: an HMAC each guard would otherwise recompute on every
 * mint and open. A pure function of (kid, namespace, principal), all three compared on a hit, so remembering it
 * changes no answer; bounded in entries (oldest dropped first) and in the length of a remembered principal.
 */
export function createPrincipalTagger(keys: KeyRing, audience: string): (kid: string, principal: Principal) => Awaitable<string> {
  const tags = new Map<string, { kid: string; namespace: string; tag: string }>();
  const remember = (kid: string, principal: Principal, tag: string): string => {
    if (!tags.has(principal[1]) && tags.size >= PRINCIPAL_TAGS_CACHED) tags.delete(tags.keys().next().value!);
    tags.set(principal[1], { kid, namespace: principal[0], tag });
    return tag;
  };
  const tagText = (mac: Uint8Array): string => cryptoProvider.base64urlEncode(mac.subarray(0, 16));
  const computeTag = (key: Uint8Array, principal: Principal): Awaitable<string> => {
    // JSON framing keeps audience, namespace and name apart whatever characters they hold.
    return andThen(cryptoProvider.hmacSha256(key, utf8Encode(canonicalJson([audience, principal[0], principal[1]]))), tagText);
  };
  return (kid, principal) => {
    const cacheable = principal[1].length <= PRINCIPAL_TAG_CACHE_MAX_CHARS;
    if (cacheable) {
      const known = tags.get(principal[1]);
      if (known !== undefined && known.kid === kid && known.namespace === principal[0]) return known.tag;
    }
    const key = keys.subkey(kid, PRINCIPAL_PURPOSE);
    if (key === undefined) throw new KeyUnknownError();
    const tag = andThen(key, (k) => computeTag(k, principal));
    return cacheable ? andThen(tag, (t) => remember(kid, principal, t)) : tag;
  };
}

/**
 * A principal's tag for this guard's own bounds (the mint quota, the outcome budget, waiting retries): one per
 * principal whichever key seals its states, so a key rotation never doubles a bound. Keyed by a secret of this
 * guard that never leaves the process (the bounds are this instance's).
 */
export function createHolderTagger(audience: string): (principal: Principal) => Awaitable<string> {
  const tagger = createPrincipalTagger(new KeyRing([{ kid: 'holder', secret: generateKey() }]), audience);
  return (principal) => tagger('holder', principal);
}
