import { createHash } from 'node:crypto';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { type KeyFingerprint, parseKeyFingerprintOffer } from '@mrtr/core/store';
import { evalScript } from './batching.js';
import type { RedisConnection } from './connection.js';
import { KEY_FINGERPRINT_SCRIPT, keyFingerprintAnswer, keyFingerprintArgs } from './scripts.js';

const KEY_FINGERPRINT_SHA = createHash('sha1').update(KEY_FINGERPRINT_SCRIPT).digest('hex');

/** Runs the fleet check's exchange (see `KEY_FINGERPRINT_SCRIPT`) on `key` (one hash: one slot on a Cluster). */
export async function exchangeFingerprints(connection: RedisConnection, key: string, offer: unknown): Promise<KeyFingerprint[]> {
  const args = keyFingerprintArgs(parseKeyFingerprintOffer(offer));
  let reply: unknown;
  try {
    reply = await evalScript(connection, KEY_FINGERPRINT_SCRIPT, KEY_FINGERPRINT_SHA, [key, ...args], 1);
  } catch (cause) {
    throw cause instanceof StoreUnavailableError ? cause : new StoreUnavailableError({ cause });
  }
  return keyFingerprintAnswer(reply);
}
