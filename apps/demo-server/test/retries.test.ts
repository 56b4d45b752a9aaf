import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accept, freshKeys, type Json, type RunningDemo, rawRpc, rpcRequest, startDemo } from './helpers.js';

// Issue 20: a client whose response was lost retries the same round with the same state and answers. It gets the
// answer the round produced the first time, and the side effect happened once (the demo counts effects on /metrics).

const ALICE = 'alice-token-retries-0123456789ab';
const REPLAYED = 'dev.mrtr/replayed';
const BOB = 'bob-token-retries-0123456789abcd';
let demo: RunningDemo;

beforeAll(async () => {
  demo = await startDemo([], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `alice:${ALICE},bob:${BOB}` } });
});
afterAll(async () => {
  expect(await demo?.stop()).toBe(0);
});

/** `mrtr_demo_effects_total{tool="…"}` from a scrape. */
async function effects(tool: string): Promise<number> {
  const text = await (await fetch(new URL('/metrics', demo.url), { headers: { authorization: `Bearer ${ALICE}` } })).text();
  const line = text.split('\n').find((l) => l.startsWith(`mrtr_demo_effects_total{tool="${tool}",`));
  expect(line, `no mrtr_demo_effects_total series for ${tool}`).toBeDefined();
  return Number(line!.slice(line!.lastIndexOf(' ') + 1));
}

/** The opaque answer to a replayed (or another user's) state. */
function expectReplayed(body: Json): void {
  expect(body.error).toMatchObject({ code: -32602, message: 'Invalid or expired requestState', data: { reason: 'invalid_request_state' } });
}

/** The capabilities the demo's destructive tools need (form elicitation). */
const FORM = { elicitation: { form: {} } };

const call = async (name: string, args: Json, extra: Json = {}, token = ALICE) => {
  const r = await rawRpc(demo.url, 'tools/call', { name, arguments: args, ...extra }, { token, capabilities: FORM });
  expect(r.status).toBe(200);
  return r.body!;
};

/**
 * Sends a tools/call round and drops the connection as soon as the response starts, never reading it: the
 * server has answered (its handler ran and the outcome was recorded), the client has lost the answer.
 */
function sendAndLoseResponse(name: string, args: Json, extra: Json): Promise<void> {
  const { headers, body } = rpcRequest('tools/call', { name, arguments: args, ...extra }, { token: ALICE, capabilities: FORM });
  return new Promise((resolve, reject) => {
    const req = httpRequest(demo.url, { method: 'POST', headers });
    req.on('response', (res) => {
      expect(res.statusCode).toBe(200);
      res.destroy();
      req.destroy();
      resolve();
    });
    req.on('error', (error) => ((error as NodeJS.ErrnoException).code === 'ECONNRESET' ? resolve() : reject(error)));
    req.end(body);
  });
}

describe('a retry after a lost response gets the same answer; the effect happens once (issue 20)', () => {
  it('deploy: the connection dies after the server answered; the retry gets the same release, deployed once', async () => {
    const before = await effects('deploy');
    const r1 = await call('deploy', { service: 'web' });
    const r2 = await call(
      'deploy',
      { service: 'web' },
      { requestState: (r1.result as Json).requestState, inputResponses: { environment: accept({ environment: 'staging' }) } },
    );
    const final = { requestState: (r2.result as Json).requestState, inputResponses: { confirm: accept({ confirm: true }) } };
    await sendAndLoseResponse('deploy', { service: 'web' }, final);
    const retry = (await call('deploy', { service: 'web' }, final)).result as Json;
    expect(retry.resultType ?? 'complete').toBe('complete');
    const deployed = retry.structuredContent as Json;
    expect(deployed).toMatchObject({ service: 'web', environment: 'staging', rounds: 3 });
    // Every further identical retry: the same release, not a new deployment.
    expect(((await call('deploy', { service: 'web' }, final)).result as Json).structuredContent).toEqual(deployed);
    expect(await effects('deploy')).toBe(before + 1);
    // The same state with other answers, or by another user, is still a replay.
    expectReplayed(await call('deploy', { service: 'web' }, { ...final, inputResponses: { confirm: accept({ confirm: false }) } }));
    expectReplayed(await call('deploy', { service: 'web' }, final, BOB));
    expect(await effects('deploy')).toBe(before + 1);
  });

  it('delete_files: three files, the response lost, two retries: one deletion of three files', async () => {
    const before = await effects('delete_files');
    const paths = ['a.txt', 'b.txt', 'c.txt'];
    const r1 = await call('delete_files', { paths });
    const final = { requestState: (r1.result as Json).requestState, inputResponses: { confirm: accept({ confirm: true }) } };
    await sendAndLoseResponse('delete_files', { paths }, final);
    const [x, y] = await Promise.all([call('delete_files', { paths }, final), call('delete_files', { paths }, final)]);
    expect((x.result as Json).structuredContent).toEqual({ deleted: paths });
    expect(y.result).toEqual(x.result);
    // Both answers came from the record (the lost response was the run), each marked as a replay (issue 42).
    expect((x.result as Json)._meta).toMatchObject({ [REPLAYED]: true });
    expect(await effects('delete_files')).toBe(before + 3);
  });
});

describe('idempotency keys: a first-round write retried after a lost response happens once (issue 42)', () => {
  const keyed = (key: string) => ({ _meta: { 'dev.mrtr/idempotency-key': key } });
  const mail = { to: 'bob@example.com', subject: 'Release notes' };

  it('send_email declares keys in tools/list', async () => {
    const listed = await rawRpc(demo.url, 'tools/list', {}, { token: ALICE, capabilities: FORM });
    const byName = new Map(((listed.body!.result as Json).tools as Json[]).map((t) => [t.name, t]));
    expect((byName.get('send_email')!._meta as Json)['dev.mrtr/idempotency']).toEqual({ ttlMs: expect.any(Number) });
    expect((byName.get('deploy')!._meta as Json)['dev.mrtr/idempotency']).toBeDefined();
  });

  it('send_email: the response lost, the retry gets the same message id marked replayed; one e-mail sent', async () => {
    const before = await effects('send_email');
    const key = `mail-${Date.now()}-${Math.random()}`;
    await sendAndLoseResponse('send_email', mail, keyed(key));
    const retry = (await call('send_email', mail, keyed(key))).result as Json;
    expect(retry._meta).toMatchObject({ [REPLAYED]: true });
    const { messageId } = retry.structuredContent as Json;
    expect(messageId).toMatch(/^<.+@mrtr\.demo>$/);
    expect(((await call('send_email', mail, keyed(key))).result as Json).structuredContent).toMatchObject({ messageId });
    expect(await effects('send_email')).toBe(before + 1);
    // Without a key, or with another one, it is another e-mail.
    const fresh = (await call('send_email', mail, keyed(`${key}-2`))).result as Json;
    expect(fresh._meta).not.toHaveProperty(REPLAYED);
    expect((fresh.structuredContent as Json).messageId).not.toBe(messageId);
    expect(await effects('send_email')).toBe(before + 2);
    // The same key with other arguments is refused, opaque; nothing is sent.
    const conflict = await call('send_email', { ...mail, subject: 'Other' }, keyed(key));
    expect(conflict.error).toEqual({ code: -32602, message: 'Invalid idempotency key' });
    expect(await effects('send_email')).toBe(before + 2);
  });

  it('deploy: a retried first call with its key gets the same first question and state: one flow', async () => {
    const key = `deploy-${Date.now()}-${Math.random()}`;
    const first = (await call('deploy', { service: 'web' }, keyed(key))).result as Json;
    const again = (await call('deploy', { service: 'web' }, keyed(key))).result as Json;
    expect(again.requestState).toBe(first.requestState);
    expect(again._meta).toMatchObject({ [REPLAYED]: true });
  });
});
