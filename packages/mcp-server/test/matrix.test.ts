import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAeadCodec } from '@mrtr/codec-aead';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { createJweCodec } from '@mrtr/codec-jwe';
import { KeyRing, type ReplayStore, type StateCodec } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';
import { createRedisStore } from '@mrtr/store-redis';
import { createSqliteStore } from '@mrtr/store-sql';
import { afterAll, describe, expect, it } from 'vitest';
import { INVALID_STATE_MESSAGE } from '../src/index.js';
import { callTool, connect, fixture, wireError } from './harness.js';

const REDIS_URL = process.env.REDIS_URL;
const REQUIRE = process.env.MRTR_REQUIRE_SERVICES === '1';
if (!REDIS_URL) {
  if (REQUIRE) throw new Error('MRTR_REQUIRE_SERVICES=1 but REDIS_URL is not set: the Redis rows cannot run');
  console.warn('[mcp-server matrix] REDIS_URL is not set: skipping the Redis store rows');
}

const codecs: Record<string, (keys: KeyRing) => StateCodec> = {
  hmac: (keys) => createHmacCodec(keys),
  jwe: (keys) => createJweCodec(keys),
  aead: (keys) => createAeadCodec(keys),
};

const dir = mkdtempSync(join(tmpdir(), 'mrtr-mcp-server-'));
const opened: ReplayStore[] = [];
afterAll(async () => {
  await Promise.all(opened.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

let n = 0;
const stores: Record<string, { skip: boolean; make: () => ReplayStore }> = {
  memory: { skip: false, make: () => createMemoryStore() },
  sqlite: { skip: false, make: () => createSqliteStore({ filename: join(dir, `replay-${n++}.sqlite`) }) },
  redis: {
    skip: !REDIS_URL,
    make: () => createRedisStore({ url: REDIS_URL!, namespace: `mcp-server-test-${process.pid}-${n++}` }),
  },
};

const answer = (content: Record<string, unknown>) => ({ action: 'accept', content });

/** Every base64url segment of a token, decoded as text (to look for plaintext). */
function decodedSegments(token: string): string {
  return token
    .split('.')
    .map((segment) => Buffer.from(segment, 'base64url').toString('latin1'))
    .join('\n');
}

for (const [codecName, makeCodec] of Object.entries(codecs)) {
  for (const [storeName, store] of Object.entries(stores)) {
    describe.skipIf(store.skip)(`${codecName} codec + ${storeName} store`, () => {
      it("runs a two-round flow where round 1's answer is only in the sealed state; replays are rejected", async () => {
        const keys = KeyRing.generate();
        const codec = makeCodec(keys);
        const replay = store.make();
        opened.push(replay);
        const f = fixture({ keys, codec, store: replay, allowEphemeralKeys: true }); // one test process
        const client = await connect(f);
        const args = { id: 4522 };

        const r1 = await callTool(client, 'resolve_item', args);
        expect(Object.keys(r1.inputRequests as object)).toEqual(['resolution']);
        const r2 = await callTool(client, 'resolve_item', args, {
          inputResponses: { resolution: answer({ resolution: 'Duplicate' }) },
          requestState: r1.requestState as string,
        });
        expect(Object.keys(r2.inputRequests as object)).toEqual(['duplicate_of']);
        const state2 = r2.requestState as string;
        expect(state2).not.toBe(r1.requestState);
        // Round 1's answer travels in the state: readable only for non-confidential codecs.
        expect(decodedSegments(state2).includes('Duplicate')).toBe(!codec.confidential);

        // Round 3 sends ONLY round 2's answer; round 1's comes from the state.
        const r3 = await callTool(client, 'resolve_item', args, {
          inputResponses: { duplicate_of: answer({ duplicateOf: 4301 }) },
          requestState: state2,
        });
        expect(r3.content).toEqual([{ type: 'text', text: '#4522 resolved as Duplicate of #4301' }]);

        // The completed flow cannot be replayed, nor can an older round be revived.
        for (const [state, responses] of [
          [state2, { duplicate_of: answer({ duplicateOf: 1 }) }],
          [r1.requestState as string, { resolution: answer({ resolution: 'Fixed' }) }],
        ] as const) {
          const error = await wireError(callTool(client, 'resolve_item', args, { inputResponses: responses, requestState: state }));
          expect([error.code, error.message]).toEqual([-32602, INVALID_STATE_MESSAGE]);
        }
        expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_REPLAYED', 'ERR_STATE_REPLAYED']);
        expect(f.effects).toEqual(['#4522 resolved as Duplicate of #4301']);
      });
    });
  }
}

async function deadPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('a real store outage (Redis store pointed at a closed port)', () => {
  it('answers -32603 and reports ERR_STORE_UNAVAILABLE', async () => {
    const replay = createRedisStore({
      url: `redis://127.0.0.1:${await deadPort()}`,
      connectTimeoutMs: 200,
      commandTimeoutMs: 200,
      maxReconnectDelayMs: 100,
    });
    opened.push(replay);
    const f = fixture({ store: replay, allowEphemeralKeys: true });
    const client = await connect(f);
    // The first round already: no state is minted while the store's ledger epoch cannot be learned (fail closed).
    const error = await wireError(callTool(client, 'delete_files', { path: '/x' }));
    expect([error.code, error.data]).toEqual([-32603, { reason: 'store_unavailable', retryAfterMs: 1000 }]);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STORE_UNAVAILABLE']);
    expect(f.effects).toEqual([]);
  });
});
