import { randomBytes } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/client';
import { McpServer } from '@modelcontextprotocol/server';
import { KeyRing, type ReplayStore } from '@mrtr/core';
import * as z from 'zod/v4';
import { type CodecFactory, type CreateMrtr, closeAll, connectClient, UNBOUNDED_PRINCIPAL } from './e2e.js';
import type { Job } from './harness.js';
import { loadFunction } from './load.js';

/**
 * Idempotency keys (issue 42): what a key costs a first-round write, end to end in process. One op = one `tools/call`
 * of `send_email` (asks nothing; hmac codec, memory store, recording on), with a fresh key (`keyed`: claimed, run,
 * recorded) or without one (`unkeyed`: the same tool, nothing claimed). The memory store is fresh every round.
 */
export const KEYS_CONCURRENCY = 16;

export interface KeysSetup {
  client: Client;
  /** Before each round, outside timing (fresh memory store). */
  prepare(): Promise<void>;
  /** How many times the tool ran (the check reads it). */
  runs: { count: number };
  close(): Promise<void>;
}

type MemoryFactory = (options: { maxEntries?: number; outcomeBudgetBytes?: number }) => ReplayStore & { close(): Promise<void> | void };

const AUDIENCE = 'https://mail.example/mcp';
const ARGS = { to: 'bob@example.com', subject: 'Release notes for 4.2' };
const RUN_TAG = randomBytes(6).toString('hex');
let nextKey = 0;

export const sendEmail = (client: Client, key?: string) =>
  client.callTool({ name: 'send_email', arguments: ARGS, ...(key !== undefined && { _meta: { 'dev.mrtr/idempotency-key': key } }) });
const freshKey = (): string => `${RUN_TAG}-${nextKey++}`;

/** The keyed row's server and client; `undefined` (with the reason) when a package is missing. */
export async function setupKeys(): Promise<KeysSetup | { skipped: string }> {
  const adapter = await loadFunction<CreateMrtr>('@mrtr/mcp-server', 'createMrtr');
  const memory = await loadFunction<MemoryFactory>('@mrtr/store-memory', 'createMemoryStore');
  const hmac = await loadFunction<CodecFactory>('@mrtr/codec-hmac', 'createHmacCodec');
  if (!adapter.ok) return { skipped: adapter.reason };
  if (!memory.ok) return { skipped: memory.reason };
  if (!hmac.ok) return { skipped: hmac.reason };
  const fresh = () => memory.value({ maxEntries: 4_000_000, outcomeBudgetBytes: 2 ** 40 });
  let store = fresh();
  // The adapter reaches the current store through this delegate: the memory store's capabilities but its clock and
  // epoch (a fresh store every round starts a new ledger, which would refuse keys claimed with the epoch learned before).
  const delegate: ReplayStore = {
    capabilities: { ...store.capabilities, clock: false, epoch: false },
    consume: (...args) => store.consume(...args),
    claim: (...args) => store.claim!(...args),
    record: (...args) => store.record!(...args),
    renew: (...args) => store.renew!(...args),
    release: (...args) => store.release!(...args),
    close: async () => {},
  } as ReplayStore;
  const mrtr = adapter.value({
    keys: KeyRing.generate('k1'),
    codec: hmac.value,
    store: delegate,
    audience: AUDIENCE,
    ...UNBOUNDED_PRINCIPAL,
  });
  const runs = { count: 0 };
  const client = await connectClient(() => {
    const server = new McpServer({ name: 'bench-keys', version: '1.0.0' }, { ...mrtr.serverOptions });
    const input = z.object({ to: z.string(), subject: z.string() });
    mrtr.registerTool(server, 'send_email', { inputSchema: input, idempotency: true }, async ({ to }) => {
      runs.count++;
      return { content: [{ type: 'text', text: `message ${runs.count} sent to ${to}` }] };
    });
    return server;
  });
  return {
    client,
    runs,
    async prepare() {
      await store.close();
      store = fresh();
    },
    close: () => closeAll([() => store.close(), () => client.close()]),
  };
}

/** Before timing: a keyed call runs once and its retry is the recorded answer, marked; an unkeyed call runs every time. */
export async function checkKeys(setup: KeysSetup): Promise<string[]> {
  const text = (r: unknown) => (r as { content?: { text?: string }[] }).content?.[0]?.text;
  const replayed = (r: unknown) => (r as { _meta?: Record<string, unknown> })._meta?.['dev.mrtr/replayed'] === true;
  const key = freshKey();
  const before = setup.runs.count;
  const first = await sendEmail(setup.client, key);
  const retry = await sendEmail(setup.client, key);
  if (setup.runs.count !== before + 1 || text(retry) !== text(first) || replayed(first) || !replayed(retry)) {
    throw new Error(`keys: a keyed retry must be the first answer, marked (got ${JSON.stringify([first, retry])})`);
  }
  const a = await sendEmail(setup.client);
  const b = await sendEmail(setup.client);
  if (setup.runs.count !== before + 3 || text(a) === text(b)) throw new Error('keys: an unkeyed call must run every time');
  return ['keys: a keyed call runs once and its retry is replayed (marked); an unkeyed call runs every time'];
}

/** `keys|keyed|c16` and `keys|unkeyed|c16`: one first-round call with a fresh key / without one. */
export function keyJobs(setup: KeysSetup): Job[] {
  return [
    {
      key: `keys|keyed|c${KEYS_CONCURRENCY}`,
      concurrency: KEYS_CONCURRENCY,
      batchMs: 40,
      prepare: setup.prepare,
      op: () => sendEmail(setup.client, freshKey()),
    },
    {
      key: `keys|unkeyed|c${KEYS_CONCURRENCY}`,
      concurrency: KEYS_CONCURRENCY,
      batchMs: 40,
      prepare: setup.prepare,
      op: () => sendEmail(setup.client),
    },
  ];
}
