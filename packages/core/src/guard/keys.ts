import type { StateClaims } from '../claims.js';
import type { StateCodec } from '../interfaces.js';
import type { KeyRing } from '../keys/keys.js';

/** The ring in force and the codec built on it. */
export interface KeyView {
  readonly ring: KeyRing;
  readonly codec: StateCodec;
}

/** The guard's codec, and the view an operation reads once (so a mint seals with the key its principal tag names). */
export interface GuardKeys {
  /** The codec the guard exposes: the first one for a fixed ring, one that follows the ring in force otherwise. */
  readonly codec: StateCodec;
  /** The ring in force and its codec. */
  current(): KeyView;
}

/**
 * The ring in force and its codec. A fixed ring is its own `current()`: the view never changes. A refreshing ring
 * gives a new ring when its keys or its schedule change, and only then is the codec rebuilt (no allocation per
 * operation otherwise).
 */
export function createGuardKeys(keys: KeyRing, first: StateCodec, codecFor: (ring: KeyRing) => StateCodec): GuardKeys {
  let view: KeyView = { ring: first.keys, codec: first };
  const current = (): KeyView => {
    const ring = keys.current();
    if (ring !== view.ring) view = { ring, codec: codecFor(ring) };
    return view;
  };
  const codec: StateCodec = keys.refreshing
    ? Object.freeze({
        id: first.id,
        confidential: first.confidential,
        maxTokenBytes: first.maxTokenBytes,
        keys,
        seal: (claims: StateClaims) => current().codec.seal(claims),
        // The codecs of one factory are alike: the one in force seals the JSON itself when the first one could.
        ...(first.sealJson !== undefined && {
          sealJson: (json: string) => {
            const sealer = current().codec;
            return sealer.sealJson !== undefined ? sealer.sealJson(json) : sealer.seal(JSON.parse(json) as StateClaims);
          },
        }),
        unseal: (token: string) => current().codec.unseal(token),
      })
    : first;
  return { codec, current };
}
