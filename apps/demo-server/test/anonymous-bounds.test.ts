import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accept, freshKeys, type Json, type RunningDemo, rawRpc, startDemo } from './helpers.js';

// biome-ignore lint/suspicious/noExplicitAny: wire JSON read field by field in the assertions
type Wire = Record<string, any>;

// Issue 41: without tokens every caller is one anonymous principal. One caller's waiting tasks (a production
// rollout waits for approval, up to an hour) must not refuse every other anonymous caller's: anonymous callers are
// bounded per client address too. Behind --trust-proxy 1 the address is the last X-Forwarded-For entry.

const CAPS = { elicitation: { form: {} }, extensions: { 'io.modelcontextprotocol/tasks': {} } };
let demo: RunningDemo;

beforeAll(async () => {
  demo = await startDemo(['--trust-proxy', '1'], { env: { MRTR_KEYS: freshKeys() } });
});
afterAll(async () => {
  expect(await demo?.stop()).toBe(0);
});

async function call(forwardedFor: string, params: Json): Promise<Wire> {
  const r = await rawRpc(demo.url, 'tools/call', params, { capabilities: CAPS as Json, headers: { 'x-forwarded-for': forwardedFor } });
  expect(r.status).toBe(200);
  return r.body as Wire;
}

/** Starts a production rollout from `address` (the MRTR round, then the task): the task's answer, or its refusal. */
async function rollout(address: string, service: string): Promise<Wire> {
  const round1 = await call(address, { name: 'rollout', arguments: { service } });
  expect(round1.result?.resultType).toBe('input_required');
  return call(address, {
    name: 'rollout',
    arguments: { service },
    inputResponses: { environment: accept({ environment: 'production' }) },
    requestState: round1.result.requestState,
  });
}

describe('anonymous callers of the demo, per client address', () => {
  it("one address's waiting tasks reach its bound (2) and no further; another address still starts one", async () => {
    for (const service of ['api', 'web']) expect((await rollout('198.51.100.7', service)).result).toMatchObject({ resultType: 'task' });
    // The caller's own entries to the left of the proxy's do not make it another address.
    const third = await rollout('203.0.113.1, 198.51.100.7', 'db');
    expect(third.error).toMatchObject({ code: -32600, data: { reason: 'task_limit' } });
    expect(third.error.message).toMatch(/from this address \(at most 2\)/);
    expect((await rollout('198.51.100.8', 'db')).result).toMatchObject({ resultType: 'task' });
  });
});
