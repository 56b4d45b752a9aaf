import { describe, expect, it } from 'vitest';
import { createStateGuard, KeyProvider, KeyRing, keysFromEnv } from '../src/index.js';
import { deriveKey, scheduleRotation } from '../src/entry-keys.js';
import { createBatcher } from '../src/entry-store.js';
import { testCodec } from './helpers.js';

const keys = KeyRing.generate('k1');
const guard = (extra: object) => () => createStateGuard({ codec: testCodec, keys, audience: 'aud', ...extra } as never);

describe('unknown options are refused, naming the option and the closest known name', () => {
  it('createStateGuard, its own options and every nested options object', () => {
    expect(guard({ ttlMS: 1000 })).toThrow(new TypeError('createStateGuard: unknown option "ttlMS"; did you mean "ttlMs"?'));
    // Set to undefined, still refused: a renamed option is never silently dropped.
    expect(guard({ maxRound: undefined })).toThrow(new TypeError('createStateGuard: unknown option "maxRound"; did you mean "maxRounds"?'));
    expect(guard({ zzz: 1 })).toThrow(new TypeError('createStateGuard: unknown option "zzz"'));
    expect(guard({ outcomeQuota: { maxByte: 10 } })).toThrow(
      new TypeError('createStateGuard: outcomeQuota: unknown option "maxByte"; did you mean "maxBytes"?'),
    );
    expect(guard({ mintQuota: { max: 5, windowMS: 10 } })).toThrow(
      new TypeError('createStateGuard: mintQuota: unknown option "windowMS"; did you mean "windowMs"?'),
    );
    expect(guard({ maxWaitingRetries: { perPrinciple: 1 } })).toThrow(
      new TypeError('createStateGuard: maxWaitingRetries: unknown option "perPrinciple"; did you mean "perPrincipal"?'),
    );
    expect(guard({ unauthenticated: { principal: 'local', recordOutcome: true } })).toThrow(
      new TypeError('createStateGuard: unauthenticated: unknown option "recordOutcome"; did you mean "recordOutcomes"?'),
    );
    expect(guard({ mintQuota: { max: 5 }, outcomeQuota: { maxBytes: 10 }, maxWaitingRetries: { total: 2 } })).not.toThrow();
  });

  it('KeyProvider.create, keysFromEnv, deriveKey, scheduleRotation', async () => {
    await expect(KeyProvider.create({ load: () => 'x', refreshMS: 0 } as never)).rejects.toThrow(
      new TypeError('KeyProvider.create: unknown option "refreshMS"; did you mean "refreshMs"?'),
    );
    expect(() => keysFromEnv({}, { unst: 'ephemeral' } as never)).toThrow(
      new TypeError('keysFromEnv: unknown option "unst"; did you mean "unset"?'),
    );
    expect(() => deriveKey('s'.repeat(32), { kid: 'a', label: 'b', lable: 'c' } as never)).toThrow(
      new TypeError('deriveKey: unknown option "lable"; did you mean "label"?'),
    );
    const rotation = { now: 0, propagationMs: 1, ttlMs: 1, clockSkewMs: 0, clockSkew: 5 };
    expect(() => scheduleRotation([], { kid: 'n', secret: new Uint8Array(32) }, rotation as never)).toThrow(
      new TypeError('scheduleRotation: unknown option "clockSkew"; did you mean "clockSkewMs"?'),
    );
  });

  it('createBatcher', () => {
    expect(() => createBatcher({ run: () => {}, maxBatchSize: 1, maxQueued: 1, maxInFlights: 2 } as never)).toThrow(
      new TypeError('createBatcher: unknown option "maxInFlights"; did you mean "maxInFlight"?'),
    );
  });
});
