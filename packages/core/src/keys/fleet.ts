import { storeCapabilities } from '../capabilities.js';
import { cryptoProvider } from '#crypto';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import { KeyMismatchError, KeyUnknownError, MrtrError, StoreUnavailableError } from '../errors.js';
import type { KeyFingerprint, ReplayStore } from '../interfaces.js';
import { utf8Encode } from '../util/json.js';
import type { KeyRing } from './keys.js';

/** What {@link StateGuard.checkKeys} found. */
export interface FleetKeyCheck {
  /** False when the store keeps no fingerprints (no `keyFingerprints`): nothing was compared. */
  readonly checked: boolean;
  /** The kids the fleet seals with, as the store reported them (this replica's own included). */
  readonly fleet: readonly string[];
}

const FINGERPRINT_PURPOSE = 'mrtr/key-fingerprint/v1';
/** Most records a store's answer may hold; more is a broken store. */
export const MAX_FLEET_KEYS = 256;

/** The fingerprint of `kid` in `ring` (throws `ERR_KEY_UNKNOWN` when the ring does not have it). */
export function keyFingerprint(ring: KeyRing, kid: string): Awaitable<string> {
  const key = ring.subkey(kid, FINGERPRINT_PURPOSE);
  if (key === undefined) throw new KeyUnknownError();
  return andThen(key, (k) =>
    andThen(cryptoProvider.hmacSha256(k, utf8Encode(kid)), (mac) => cryptoProvider.base64urlEncode(mac.subarray(0, 16))),
  );
}

/**
 * The fleet check: publishes the fingerprint of the key this replica seals with (kept until a state it seals now can
 * no longer be presented, `now + lifetimeMs`) through the store's `keyFingerprints`, then compares with every record
 * the store holds. Throws `ERR_KEY_MISMATCH` naming the kid when the fleet holds another secret under a kid of this
 * ring (`reason: "secret"`: e.g. every replica generated its own `k1`), or seals with a kid this ring lacks
 * (`reason: "missing"`: this replica's source is behind the fleet's). A store failure is `ERR_STORE_UNAVAILABLE`.
 */
export async function checkFleetKeys(
  keys: KeyRing,
  store: ReplayStore | undefined,
  options: { now: number; lifetimeMs: number },
): Promise<FleetKeyCheck> {
  if (store === undefined || !storeCapabilities(store).keyExchange) return { checked: false, fleet: [] };
  const exchange = store.keyFingerprints!;
  const ring = keys.current();
  const kid = ring.primaryKid;
  const mine: KeyFingerprint = { kid, fingerprint: await keyFingerprint(ring, kid), expiresAtMs: options.now + options.lifetimeMs };
  let records: unknown;
  try {
    records = await exchange.call(store, [mine]);
  } catch (cause) {
    if (MrtrError.is(cause)) throw cause;
    throw new StoreUnavailableError({ cause });
  }
  if (!Array.isArray(records) || records.length > MAX_FLEET_KEYS) {
    throw new StoreUnavailableError({ cause: new TypeError('keyFingerprints must resolve an array of at most 256 records') });
  }
  const fleet: string[] = [];
  for (const record of records as unknown[]) {
    const { kid: other, fingerprint, expiresAtMs } = (record ?? {}) as Partial<KeyFingerprint>;
    if (typeof other !== 'string' || typeof fingerprint !== 'string' || typeof expiresAtMs !== 'number') {
      throw new StoreUnavailableError({ cause: new TypeError('keyFingerprints returned a malformed record') });
    }
    if (expiresAtMs <= options.now) continue;
    fleet.push(other);
    const where = { expiresAtMs, namespace: typeof store.namespace === 'string' ? store.namespace : undefined };
    if (!ring.has(other)) throw new KeyMismatchError(other, 'missing', where);
    if (fingerprint !== (await keyFingerprint(ring, other))) throw new KeyMismatchError(other, 'secret', where);
  }
  return { checked: true, fleet };
}

const OFFER_KID = /^[A-Za-z0-9_-]{1,32}$/;
const OFFER_FINGERPRINT = /^[A-Za-z0-9_-]{1,256}$/;

/**
 * For store authors: checks an offer to `ReplayStore.keyFingerprints` (an array of at most {@link MAX_FLEET_KEYS}
 * records, each a kid of 1–32 characters of `[A-Za-z0-9_-]`, a fingerprint of 1–256 base64url characters and a finite
 * `expiresAtMs`) and returns copies with `expiresAtMs` rounded up (a record is kept until at least then). Throws a
 * `TypeError` (`RangeError` for too many records) labelled `keyFingerprints`.
 */
export function parseKeyFingerprintOffer(offer: unknown): KeyFingerprint[] {
  if (!Array.isArray(offer)) throw new TypeError('keyFingerprints: offer must be an array of records');
  if (offer.length > MAX_FLEET_KEYS) throw new RangeError(`keyFingerprints: offer at most ${MAX_FLEET_KEYS} records`);
  return offer.map((record: unknown) => {
    if (record === null || typeof record !== 'object') throw new TypeError('keyFingerprints: each record must be an object');
    const { kid, fingerprint, expiresAtMs } = record as Record<string, unknown>;
    if (typeof kid !== 'string' || !OFFER_KID.test(kid)) {
      throw new TypeError('keyFingerprints: kid must be 1-32 characters of [A-Za-z0-9_-]');
    }
    if (typeof fingerprint !== 'string' || !OFFER_FINGERPRINT.test(fingerprint)) {
      throw new TypeError('keyFingerprints: fingerprint must be 1-256 base64url characters');
    }
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      throw new TypeError('keyFingerprints: expiresAtMs must be a finite number');
    }
    return { kid, fingerprint, expiresAtMs: Math.ceil(expiresAtMs) };
  });
}

/**
 * For store authors: the exchange's rules applied to the records a store holds, in one atomic step of the store's
 * (under its lock, in its transaction, in its single-threaded object). `held`: the records the store holds (expired
 * ones are dropped, judged by `now`, the store's clock); `offer`: a checked offer ({@link parseKeyFingerprintOffer}).
 * Each offered record, in order: stored when its kid has no live record, extends a live record with the same
 * fingerprint to the later expiry, and leaves one with another fingerprint as it is (first writer wins); a record
 * already expired is not stored. Returns every live record (sorted by kid) and those to write (new or extended), or
 * `undefined` when a new kid would take the store past {@link MAX_FLEET_KEYS} live records (write nothing: the store
 * rejects `ERR_STORE_UNAVAILABLE`).
 */
export function applyKeyFingerprintOffer(
  held: readonly KeyFingerprint[],
  offer: readonly KeyFingerprint[],
  now: number,
): { records: KeyFingerprint[]; writes: KeyFingerprint[] } | undefined {
  const live = new Map<string, KeyFingerprint>();
  for (const record of held) if (record.expiresAtMs > now) live.set(record.kid, record);
  const writes = new Map<string, KeyFingerprint>();
  let added = 0;
  for (const record of offer) {
    if (record.expiresAtMs <= now) continue;
    const current = live.get(record.kid);
    if (current !== undefined && (current.fingerprint !== record.fingerprint || current.expiresAtMs >= record.expiresAtMs)) continue;
    if (current === undefined) added++;
    const next = { kid: record.kid, fingerprint: record.fingerprint, expiresAtMs: record.expiresAtMs };
    live.set(record.kid, next);
    writes.set(record.kid, next);
  }
  if (added > 0 && live.size > MAX_FLEET_KEYS) return undefined;
  const byKid = (a: KeyFingerprint, b: KeyFingerprint) => (a.kid < b.kid ? -1 : a.kid > b.kid ? 1 : 0);
  return { records: [...live.values()].sort(byKid), writes: [...writes.values()].sort(byKid) };
}

/** The rejection of an offer that would take a store past {@link MAX_FLEET_KEYS} live records. */
export const fleetKeysFull = (): StoreUnavailableError =>
  new StoreUnavailableError({
    cause: new RangeError(`keyFingerprints: the store already holds ${MAX_FLEET_KEYS} unexpired key fingerprints`),
  });
