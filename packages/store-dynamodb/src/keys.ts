import { type AttributeValue, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { applyKeyFingerprintOffer, fleetKeysFull, type KeyFingerprint, parseKeyFingerprintOffer } from '@mrtr/core/store';
import { num, readItem, str, type Table, ttlOf } from './table.js';

/** Rounds of read, apply and conditional put before an exchange gives up (other instances writing in between each time). */
const MAX_ROUNDS = 8;

const broken = (): StoreUnavailableError =>
  new StoreUnavailableError({ cause: new Error('the key fingerprint item is not one this store wrote') });

/** The records of the item's `kf` attribute (a JSON array of `[kid, fingerprint, expiresAtMs]`). */
function recordsOf(item: Record<string, AttributeValue> | undefined): KeyFingerprint[] {
  if (item === undefined) return [];
  const text = str(item.kf);
  if (text === undefined) throw broken();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw broken();
  }
  if (!Array.isArray(parsed)) throw broken();
  return parsed.map((r: unknown) => {
    if (!Array.isArray(r) || typeof r[0] !== 'string' || typeof r[1] !== 'string' || typeof r[2] !== 'number') throw broken();
    return { kid: r[0], fingerprint: r[1], expiresAtMs: r[2] };
  });
}

/**
 * `keyFingerprints` on DynamoDB: the namespace's records are one item (`f#<ns>#keys`: `kf`, a JSON array of at most 256
 * records, about 80 KB at most; `v`, its version; `ttl`, for DynamoDB's TTL, after the latest record). Each round reads
 * it (strongly consistent), applies the offer by the contract's rules (`applyKeyFingerprintOffer`) judged by the
 * measured service clock (expiry is checked on read: DynamoDB's TTL deletes late), and writes it with a put conditioned
 * on the version it read; another instance's write in between starts the next round (at most 8). Running it twice
 * answers as once (a retry after a lost reply is safe).
 */
export function keyFingerprintsOf(table: Table, open: () => void): (offer: readonly KeyFingerprint[]) => Promise<KeyFingerprint[]> {
  const key = table.key('f', 'keys');
  return async (offer) => {
    const checked = parseKeyFingerprintOffer(offer);
    open();
    await table.measure(false);
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const item = await readItem(table, key);
      const version = item === undefined ? 0 : num(item.v);
      if (version === undefined) throw broken();
      const held = recordsOf(item);
      const now = table.serviceNow();
      const applied = applyKeyFingerprintOffer(held, checked, now);
      if (applied === undefined) throw fleetKeysFull();
      if (applied.writes.length === 0) return applied.records;
      const latest = Math.max(...applied.records.map((r) => r.expiresAtMs));
      const reply = await table.send(
        new PutItemCommand({
          TableName: table.tableName,
          Item: {
            ...key,
            kf: { S: JSON.stringify(applied.records.map((r) => [r.kid, r.fingerprint, r.expiresAtMs])) },
            v: { N: String(version + 1) },
            ttl: { N: ttlOf(latest) },
          },
          ConditionExpression: version === 0 ? 'attribute_not_exists(pk)' : '#v = :v',
          ...(version !== 0 && { ExpressionAttributeNames: { '#v': 'v' }, ExpressionAttributeValues: { ':v': { N: String(version) } } }),
        }),
      );
      if (reply !== 'condition') return applied.records;
    }
    throw new StoreUnavailableError({ cause: new Error(`keyFingerprints: ${MAX_ROUNDS} rounds lost to concurrent writers`) });
  };
}
