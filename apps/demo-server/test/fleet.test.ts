import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  accept,
  type Connected,
  callTool,
  connectClient,
  expectStateRejected,
  freshKeys,
  type Json,
  type RunningDemo,
  rawRpc,
  runCli,
  serviceUrl,
  startDemo,
  textOf,
  replayed,
} from './helpers.js';

// biome-ignore lint/suspicious/noExplicitAny: wire JSON read field by field in the assertions
type Wire = Record<string, any>;

/**
 * Two `mrtr-demo` processes sharing MRTR_KEYS and one replay store (Redis, then PostgreSQL): a flow started on
 * A continues on B, an identical retry on A gets B's result from the shared store, a replay with other answers is refused, and an instance with other keys refuses the states.
 * Tasks live on the same backend: a rollout running on A is answered through B, and a third instance started
 * afterwards reads its result.
 */
const TOKENS = 'alice:alice-token-0123456789abcdef';
const ALICE = 'alice-token-0123456789abcdef';
const TASK_CAPS = { elicitation: { form: {} }, extensions: { 'io.modelcontextprotocol/tasks': {} } };

/** A 2026-07-28 request as Alice with the tasks extension; the result, or the test fails with the error. */
async function taskRpc(url: string, method: string, params: Json): Promise<Wire> {
  const headers = typeof params.taskId === 'string' ? { 'mcp-name': params.taskId } : undefined;
  const r = await rawRpc(url, method, params, { token: ALICE, capabilities: TASK_CAPS, ...(headers && { headers }) });
  expect(r.body?.error, `${method}: ${r.text}`).toBeUndefined();
  return r.body!.result as Wire;
}

/** Polls tasks/get on `url` until `done`; bounded in count. */
async function untilTask(url: string, taskId: string, done: (task: Wire) => boolean): Promise<Wire> {
  for (let i = 0; i < 3_000; i++) {
    const task = await taskRpc(url, 'tasks/get', { taskId });
    if (done(task)) return task;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('the task never reached the expected state');
}

// Both stores keep the fleet's key fingerprints, so an instance with other keys is refused at start.
const backends = [
  { store: 'redis', env: 'REDIS_URL', codec: 'aead' },
  { store: 'postgres', env: 'DATABASE_URL', codec: 'jwe' },
] as const;

for (const backend of backends) {
  const service = serviceUrl(backend.env);
  if (service.error !== undefined) {
    it(`fleet on ${backend.store}`, () => {
      throw new Error(service.error);
    });
    continue;
  }
  if (service.skip !== undefined) console.warn(`skipping the ${backend.store} fleet tests: ${service.skip}`);

  describe.skipIf(service.url === undefined)(`two instances sharing MRTR_KEYS and ${backend.store}`, () => {
    const keys = freshKeys();
    // One namespace for the fleet (A and B); the instance with other keys is another fleet, in a namespace of its own.
    const namespace = `fleet-${process.pid}-${Date.now().toString(36)}`;
    const env = {
      MRTR_KEYS: keys,
      MRTR_DEMO_TOKENS: TOKENS,
      [backend.env]: service.url,
      MRTR_DEMO_CONNECT_WAIT_MS: '0',
      MRTR_DEMO_NAMESPACE: namespace,
    };
    const args = ['--store', backend.store, '--codec', backend.codec];
    let a: RunningDemo;
    let b: RunningDemo;
    let other: RunningDemo;
    let onA: Connected;
    let onB: Connected;
    let onOther: Connected;

    beforeAll(async () => {
      [a, b, other] = await Promise.all([
        startDemo(args, { env }),
        startDemo(args, { env }),
        startDemo(args, { env: { ...env, MRTR_KEYS: freshKeys(), MRTR_DEMO_NAMESPACE: `${namespace}-other` } }),
      ]);
      [onA, onB, onOther] = await Promise.all([
        connectClient(a.url, { token: ALICE }),
        connectClient(b.url, { token: ALICE }),
        connectClient(other.url, { token: ALICE }),
      ]);
    });

    afterAll(async () => {
      await Promise.all([onA, onB, onOther].map((c) => c?.close()));
      const codes = await Promise.all([a, b, other].map((d) => d?.stop()));
      expect(codes).toEqual([0, 0, 0]);
    });

    it("round 1 on A, round 2 on B completes; an identical retry on A gets B's result; replaying with other answers is refused", async () => {
      const toolArgs = { paths: ['shared/report.pdf'] };
      const r1 = await callTool(onA.client, 'delete_files', toolArgs);
      expect(r1.resultType).toBe('input_required');
      const retry = { inputResponses: { confirm: accept({ confirm: true }) }, requestState: r1.requestState as string };
      const r2 = await callTool(onB.client, 'delete_files', toolArgs, retry);
      expect(textOf(r2)).toContain('Deleted 1 file');
      // An identical retry on the other instance gets the result B recorded in the shared store; nothing runs again.
      expect(await callTool(onA.client, 'delete_files', toolArgs, retry)).toEqual(replayed(r2));
      const replay = { ...retry, inputResponses: { confirm: accept({ confirm: false }) } };
      await expectStateRejected(callTool(onA.client, 'delete_files', toolArgs, replay));
      await expectStateRejected(callTool(onB.client, 'delete_files', toolArgs, replay));
      expect(a.stderr()).toContain('ERR_STATE_REPLAYED');
    });

    it("an instance with other keys in the fleet's namespace refuses to start, naming the kid, the namespace, until when and the fix", async () => {
      const refused = await runCli([...args, '--port', '0'], { ...env, MRTR_KEYS: freshKeys() });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain('MRTR_KEYS holds another secret under kid "k2" than the fleet on this store');
      expect(refused.stderr).toContain('give every instance the same MRTR_KEYS');
      expect(refused.stderr).toMatch(
        new RegExp(
          `namespace "${namespace}" holds the fleet's record of kid "k2" until \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z: if no instance runs under those keys any more`,
        ),
      );
      expect(refused.stderr).not.toContain('Unhandled');
      // Behind the fleet: it lacks the kid the fleet seals with.
      const behind = await runCli([...args, '--port', '0'], { ...env, MRTR_KEYS: keys.split(',')[1] });
      expect(behind.code).toBe(1);
      expect(behind.stderr).toContain('the fleet on this store seals with kid "k2" and MRTR_KEYS lacks it');
      // No MRTR_KEYS with a shared store: refused, never an ephemeral key.
      const ephemeral = await runCli([...args, '--port', '0'], { ...env, MRTR_KEYS: undefined });
      expect(ephemeral.code).toBe(2);
      expect(ephemeral.stderr).toContain('MRTR_KEYS is not set and --store');
    });

    it('an instance with other keys refuses the state', async () => {
      const toolArgs = { paths: ['shared/other.pdf'] };
      const r1 = await callTool(onA.client, 'delete_files', toolArgs);
      const retry = { inputResponses: { confirm: accept({ confirm: true }) }, requestState: r1.requestState as string };
      await expectStateRejected(callTool(onOther.client, 'delete_files', toolArgs, retry));
      expect(other.stderr()).toMatch(/ERR_KEY_UNKNOWN|ERR_STATE_INTEGRITY/);
      // The refusal did not consume it: the state is still good on the fleet that minted it.
      expect(textOf(await callTool(onB.client, 'delete_files', toolArgs, retry))).toContain('Deleted 1 file');
    });

    it('a four-round production deploy alternating A, B, A, B', async () => {
      const toolArgs = { service: 'billing' };
      const clients = [onA, onB, onA, onB];
      const answers: (Json | undefined)[] = [
        undefined,
        { environment: accept({ environment: 'production' }) },
        { confirm: accept({ confirm: true }) },
        { type_service_name: accept({ service: 'billing' }) },
      ];
      let state: string | undefined;
      let result: Json = {};
      for (let round = 0; round < 4; round++) {
        const extra = answers[round] === undefined ? {} : { inputResponses: answers[round]!, requestState: state! };
        result = await callTool(clients[round]!.client, 'deploy', toolArgs, extra);
        state = result.requestState as string | undefined;
      }
      expect(textOf(result)).toMatch(/Deployed billing to production .* after 4 round/);
    });

    it('a rollout task started on A is answered through B, finishes on A, and a third instance reads its result', async () => {
      const round1 = await taskRpc(a.url, 'tools/call', { name: 'rollout', arguments: { service: 'ledger' } });
      const created = await taskRpc(a.url, 'tools/call', {
        name: 'rollout',
        arguments: { service: 'ledger' },
        inputResponses: { environment: accept({ environment: 'production' }) },
        requestState: round1.requestState,
      });
      expect(created.resultType).toBe('task');
      const taskId = created.taskId as string;
      // B sees the question the work on A asked, and takes the answer.
      const waiting = await untilTask(b.url, taskId, (t) => t.status === 'input_required');
      expect(Object.keys(waiting.inputRequests)).toEqual(['approve_rollout']);
      await taskRpc(b.url, 'tasks/update', { taskId, inputResponses: { approve_rollout: accept({ approve: true }) } });
      const done = await untilTask(b.url, taskId, (t) => t.status !== 'working' && t.status !== 'input_required');
      expect(done.status).toBe('completed');
      expect(done.result.structuredContent).toMatchObject({ service: 'ledger', environment: 'production', updated: 10 });
      const third = await startDemo(args, { env });
      try {
        expect(await taskRpc(third.url, 'tasks/get', { taskId })).toMatchObject({ status: 'completed', result: done.result });
      } finally {
        expect(await third.stop()).toBe(0);
      }
    });

    it('connect_account: the link is completed through B, the flow finishes on A (shared ledger)', async () => {
      const r1 = await callTool(onA.client, 'connect_account', { provider: 'gitlab' });
      const url = new URL(String(((r1.inputRequests as Record<string, Json>).connect!.params as Json).url));
      // The user's browser reaches the fleet through B.
      const viaB = `${b.origin}${url.pathname}`;
      const page = await fetch(viaB, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ decision: 'connect', token: ALICE }).toString(),
      });
      expect(page.status).toBe(200);
      const r2 = await callTool(
        onA.client,
        'connect_account',
        { provider: 'gitlab' },
        {
          inputResponses: { connect: { action: 'accept' } },
          requestState: r1.requestState as string,
        },
      );
      expect(textOf(r2)).toBe('Connected your gitlab account (simulated).');
    });
  });
}
