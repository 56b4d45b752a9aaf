import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  accept,
  type Connected,
  callTool,
  connectClient,
  expectStateRejected,
  freshKeys,
  getPrompt,
  InputRequiredResultSchema,
  type Json,
  lastResult,
  rawRpc,
  readResource,
  rejection,
  type RunningDemo,
  startDemo,
  tamper,
  textOf,
  replayed,
} from './helpers.js';

const ALICE = 'alice-token-0123456789abcdef';
const BOB = 'bob-token-0123456789abcdefgh';

let demo: RunningDemo;
let alice: Connected;
let bob: Connected;

beforeAll(async () => {
  demo = await startDemo([], {
    env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `alice:${ALICE},bob:${BOB}`, MRTR_DEMO_CONNECT_WAIT_MS: '300' },
  });
  alice = await connectClient(demo.url, { token: ALICE });
  bob = await connectClient(demo.url, { token: BOB });
});

afterAll(async () => {
  await alice?.close();
  await bob?.close();
  const code = await demo?.stop();
  expect(code).toBe(0);
});

describe('delete_files: a single confirmation over real HTTP', () => {
  const args = { paths: ['notes/a.txt', 'notes/b.txt'] };

  it('returns an interim result that validates as InputRequiredResult; tampered state is rejected; the untampered retry completes; an identical retry gets the same result; a replay is rejected', async () => {
    const r1 = await callTool(alice.client, 'delete_files', args);
    const wire = lastResult(alice.wire);
    expect(InputRequiredResultSchema.safeParse(wire).success).toBe(true);
    expect(InputRequiredResultSchema.safeParse({ ...wire, resultType: 'complete' }).success).toBe(false);
    expect(wire.resultType).toBe('input_required');
    expect(Object.keys(wire.inputRequests as Json)).toEqual(['confirm']);
    const state = r1.requestState as string;
    expect(typeof state).toBe('string');
    expect(state).toBe(wire.requestState);

    const answer = { confirm: accept({ confirm: true }) };
    await expectStateRejected(callTool(alice.client, 'delete_files', args, { inputResponses: answer, requestState: tamper(state) }));
    await expectStateRejected(callTool(alice.client, 'delete_files', args, { inputResponses: answer, requestState: `${state}-TAMPERED` }));

    const r2 = await callTool(alice.client, 'delete_files', args, { inputResponses: answer, requestState: state });
    expect(lastResult(alice.wire).resultType).toBe('complete');
    expect(r2.isError).not.toBe(true);
    expect(textOf(r2)).toContain('Deleted 2 files');

    // An identical retry (as after a lost response) gets the same result; nothing is deleted again.
    expect(await callTool(alice.client, 'delete_files', args, { inputResponses: answer, requestState: state })).toEqual(replayed(r2));
    // Single use: the same state with other answers (the flow already completed) is refused.
    const other = { confirm: accept({ confirm: false }) };
    await expectStateRejected(callTool(alice.client, 'delete_files', args, { inputResponses: other, requestState: state }));
    expect(demo.stderr()).toContain('ERR_STATE_REPLAYED');
  });

  it("rejects another principal's state, and a state presented with other arguments or for another tool", async () => {
    const r1 = await callTool(alice.client, 'delete_files', args);
    const state = r1.requestState as string;
    const answer = { confirm: accept({ confirm: true }) };
    await expectStateRejected(callTool(bob.client, 'delete_files', args, { inputResponses: answer, requestState: state }));
    await expectStateRejected(
      callTool(alice.client, 'delete_files', { paths: ['etc/passwd'] }, { inputResponses: answer, requestState: state }),
    );
    await expectStateRejected(callTool(alice.client, 'deploy', { service: 'web' }, { inputResponses: answer, requestState: state }));
    expect(demo.stderr()).toContain('ERR_STATE_PRINCIPAL');
    expect(demo.stderr()).toContain('ERR_STATE_BINDING');
  });

  it('finishes with a clear result on decline, on cancel and on an unconfirmed accept', async () => {
    for (const [response, expected, isError] of [
      [{ action: 'decline' }, 'declined', true],
      [{ action: 'cancel' }, 'cancelled', true],
      [accept({ confirm: false }), 'Not confirmed', false],
    ] as const) {
      const r1 = await callTool(alice.client, 'delete_files', args);
      const r2 = await callTool(alice.client, 'delete_files', args, {
        inputResponses: { confirm: response },
        requestState: r1.requestState as string,
      });
      expect(textOf(r2)).toContain(expected);
      expect(r2.isError === true).toBe(isError);
      expect(textOf(r2)).toContain('no file was deleted');
    }
  });

  it('asks again when the answer has the wrong type (validated against the requested schema)', async () => {
    const r1 = await callTool(alice.client, 'delete_files', args);
    const r2 = await callTool(alice.client, 'delete_files', args, {
      inputResponses: { confirm: accept({ confirm: 'yes please' }) },
      requestState: r1.requestState as string,
    });
    expect(r2.resultType).toBe('input_required');
    expect(Object.keys(r2.inputRequests as Json)).toEqual(['confirm']);
  });

  it('completes with the SDK auto-fulfil loop and an elicitation handler', async () => {
    const asked: Json[] = [];
    const auto = await connectClient(demo.url, {
      token: ALICE,
      autoFulfill: true,
      onElicit: (params) => {
        asked.push(params);
        return accept({ confirm: true });
      },
    });
    try {
      const result = (await auto.client.callTool({ name: 'delete_files', arguments: { paths: ['tmp/x'] } })) as Json;
      expect(textOf(result)).toContain('Deleted 1 file');
      expect(asked).toHaveLength(1);
      expect(String(asked[0]!.message)).toContain('tmp/x');
    } finally {
      await auto.close();
    }
  });
});

describe('deploy: several rounds, earlier answers only in the sealed state', () => {
  it('production: environment → confirm → typed service name, each round carrying only its own answer', async () => {
    const args = { service: 'web' };
    const r1 = await callTool(alice.client, 'deploy', args);
    expect(Object.keys(r1.inputRequests as Json)).toEqual(['environment']);
    const r2 = await callTool(alice.client, 'deploy', args, {
      inputResponses: { environment: accept({ environment: 'production' }) },
      requestState: r1.requestState as string,
    });
    expect(InputRequiredResultSchema.safeParse(lastResult(alice.wire)).success).toBe(true);
    expect(Object.keys(r2.inputRequests as Json)).toEqual(['confirm']);
    expect(r2.requestState).not.toBe(r1.requestState);
    // Round 3 sends only the confirmation: the environment comes from the sealed state.
    const r3 = await callTool(alice.client, 'deploy', args, {
      inputResponses: { confirm: accept({ confirm: true }) },
      requestState: r2.requestState as string,
    });
    expect(Object.keys(r3.inputRequests as Json)).toEqual(['type_service_name']);
    // Going back to round 2's state after round 3 was issued: as sent (a retry), it gets round 3 again, with the same
    // state; with another answer it is refused (each round's state is single-use).
    expect(
      await callTool(alice.client, 'deploy', args, {
        inputResponses: { confirm: accept({ confirm: true }) },
        requestState: r2.requestState as string,
      }),
    ).toEqual(replayed(r3));
    await expectStateRejected(
      callTool(alice.client, 'deploy', args, {
        inputResponses: { confirm: accept({ confirm: false }) },
        requestState: r2.requestState as string,
      }),
    );
    const r4 = await callTool(alice.client, 'deploy', args, {
      inputResponses: { type_service_name: accept({ service: 'web' }) },
      requestState: r3.requestState as string,
    });
    expect(r4.resultType ?? lastResult(alice.wire).resultType).toBe('complete');
    expect(textOf(r4)).toMatch(/Deployed web to production .* after 4 round/);
    expect(r4.structuredContent).toMatchObject({ service: 'web', environment: 'production', rounds: 4 });
    // Retrying the final round as sent gets the same deployment (the same release: nothing deployed again);
    // replaying it with another answer is refused.
    const again = await callTool(alice.client, 'deploy', args, {
      inputResponses: { type_service_name: accept({ service: 'web' }) },
      requestState: r3.requestState as string,
    });
    expect(again.structuredContent).toEqual(r4.structuredContent);
    await expectStateRejected(
      callTool(alice.client, 'deploy', args, {
        inputResponses: { type_service_name: accept({ service: 'api' }) },
        requestState: r3.requestState as string,
      }),
    );
  });

  it('staging needs two rounds; a mistyped production name aborts with a clear error', async () => {
    const auto = await connectClient(demo.url, {
      token: ALICE,
      autoFulfill: true,
      onElicit: (params) => {
        const message = String(params.message);
        if (message.startsWith('Where')) return accept({ environment: message.includes('api') ? 'production' : 'staging' });
        if (message.startsWith('Deploy')) return accept({ confirm: true });
        return accept({ service: 'not-the-name' });
      },
    });
    try {
      const staging = (await auto.client.callTool({ name: 'deploy', arguments: { service: 'web' } })) as Json;
      expect(textOf(staging)).toMatch(/Deployed web to staging .* after 3 round/);
      const mistyped = (await auto.client.callTool({ name: 'deploy', arguments: { service: 'api' } })) as Json;
      expect(mistyped.isError).toBe(true);
      expect(textOf(mistyped)).toContain('did not match');
    } finally {
      await auto.close();
    }
  });
});

describe('summarize (sampling) and list_workspace (roots)', () => {
  it('summarize asks the client model and uses its answer', async () => {
    const args = { text: 'MRTR lets servers ask for input. The client answers and retries. State is sealed.' };
    const r1 = await callTool(alice.client, 'summarize', args);
    const request = (r1.inputRequests as Record<string, Json>).summary!;
    expect(request.method).toBe('sampling/createMessage');
    const r2 = await callTool(alice.client, 'summarize', args, {
      inputResponses: {
        summary: { role: 'assistant', content: { type: 'text', text: 'Servers ask, clients answer.' }, model: 'test-model' },
      },
      requestState: r1.requestState as string,
    });
    expect(textOf(r2)).toBe('Summary (by test-model): Servers ask, clients answer.');
  });

  it('summarize degrades without the sampling capability; list_workspace fails with -32021 without roots', async () => {
    const plain = await connectClient(demo.url, { token: ALICE, capabilities: { elicitation: { form: {} } } });
    try {
      const result = await callTool(plain.client, 'summarize', { text: 'First sentence. Second one. Third one.' });
      expect(textOf(result)).toContain('First sentence. Second one.');
      expect(plain.wire.some((m) => JSON.stringify(m).includes('sampling/createMessage'))).toBe(false);
      const error = await rejection(callTool(plain.client, 'list_workspace', {}));
      expect(error.code).toBe(-32021);
      expect((error.data as Json).requiredCapabilities).toEqual({ roots: {} });
    } finally {
      await plain.close();
    }
  });

  it('list_workspace lists the roots the client shares', async () => {
    const auto = await connectClient(demo.url, {
      token: ALICE,
      autoFulfill: true,
      roots: [{ uri: 'file:///home/alice/project', name: 'project' }],
    });
    try {
      const result = (await auto.client.callTool({ name: 'list_workspace', arguments: {} })) as Json;
      expect(textOf(result)).toContain('project: file:///home/alice/project');
    } finally {
      await auto.close();
    }
  });
});

describe('connect_account: URL-mode elicitation completed on the server-served page', () => {
  const args = { provider: 'github' };

  async function submit(url: string, body: Record<string, string>, origin?: string): Promise<Response> {
    return fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...(origin === undefined ? {} : { origin }) },
      body: new URLSearchParams(body).toString(),
      redirect: 'manual',
    });
  }

  it('learns completion from the ledger, not from accept: accept before the page re-asks, after the page completes', async () => {
    const r1 = await callTool(alice.client, 'connect_account', args);
    const request = (r1.inputRequests as Record<string, Json>).connect!;
    const params = request.params as Json;
    expect(params.mode).toBe('url');
    const url = String(params.url);
    expect(new URL(url).origin).toBe(demo.origin);
    expect(url).toMatch(/\/connect\/[A-Za-z0-9_-]{22}$/);
    expect(url).not.toContain('alice');

    // The client accepts (consent) before the user finished on the page: not connected, asked again.
    const r2 = await callTool(alice.client, 'connect_account', args, {
      inputResponses: { connect: { action: 'accept' } },
      requestState: r1.requestState as string,
    });
    expect(r2.resultType).toBe('input_required');
    expect(((r2.inputRequests as Record<string, Json>).connect!.params as Json).url).toBe(url);

    const page = await fetch(url);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    const html = await page.text();
    expect(html).toContain('github');
    expect(html).toContain('name="token"');

    // Bob cannot complete Alice's link; a foreign Origin is refused; Alice can.
    expect((await submit(url, { decision: 'connect', token: BOB })).status).toBe(403);
    expect((await submit(url, { decision: 'connect', token: ALICE }, 'https://evil.example')).status).toBe(403);
    const done = await submit(url, { decision: 'connect', token: ALICE }, demo.origin);
    expect(done.status).toBe(200);
    expect((await submit(url, { decision: 'connect', token: ALICE })).status).toBe(410);

    const r3 = await callTool(alice.client, 'connect_account', args, {
      inputResponses: { connect: { action: 'accept' } },
      requestState: r2.requestState as string,
    });
    expect(textOf(r3)).toBe('Connected your github account (simulated).');
    expect(r3.structuredContent).toEqual({ provider: 'github', connected: true });
  });

  it('reports a refusal on the page and a decline in the client as clear errors', async () => {
    const r1 = await callTool(alice.client, 'connect_account', args);
    const url = String(((r1.inputRequests as Record<string, Json>).connect!.params as Json).url);
    expect((await submit(url, { decision: 'deny', token: ALICE })).status).toBe(200);
    const refused = await callTool(alice.client, 'connect_account', args, {
      inputResponses: { connect: { action: 'accept' } },
      requestState: r1.requestState as string,
    });
    expect(refused.isError).toBe(true);
    expect(textOf(refused)).toContain('refused on the connect page');

    const s1 = await callTool(alice.client, 'connect_account', { provider: 'slack' });
    const declined = await callTool(
      alice.client,
      'connect_account',
      { provider: 'slack' },
      {
        inputResponses: { connect: { action: 'decline' } },
        requestState: s1.requestState as string,
      },
    );
    expect(declined.isError).toBe(true);
    expect(textOf(declined)).toContain('declined');
    // The declined link can no longer be completed on the page.
    const link = String(((s1.inputRequests as Record<string, Json>).connect!.params as Json).url);
    expect((await fetch(link)).status).toBe(410);
  });

  it('ends a link left unfinished past the round limit with a clear error, not an opaque -32602', async () => {
    let result = await callTool(alice.client, 'connect_account', { provider: 'gitlab' });
    let rounds = 1;
    // Bounded: a flow mints at most 8 states (the default maxRounds), so the 9th call must end it; the loop
    // allows two more before it fails.
    while (result.resultType === 'input_required' && rounds < 11) {
      result = await callTool(
        alice.client,
        'connect_account',
        { provider: 'gitlab' },
        {
          inputResponses: { connect: { action: 'accept' } },
          requestState: result.requestState as string,
        },
      );
      rounds++;
    }
    expect(rounds).toBe(9);
    expect(result.isError).toBe(true);
    expect(textOf(result)).toBe('The gitlab connect page was not completed in time. Call connect_account again for a new link.');
  });

  it('answers -32021 naming elicitation.url when the client only declares form elicitation', async () => {
    const formOnly = await connectClient(demo.url, { token: ALICE, capabilities: { elicitation: { form: {} } } });
    try {
      const error = await rejection(callTool(formOnly.client, 'connect_account', args));
      expect(error.code).toBe(-32021);
      expect((error.data as Json).requiredCapabilities).toEqual({ elicitation: { url: {} } });
    } finally {
      await formOnly.close();
    }
  });

  it('serves 404 for unknown links', async () => {
    expect((await fetch(`${demo.origin}/connect/AAAAAAAAAAAAAAAAAAAAAA`)).status).toBe(404);
    expect((await fetch(`${demo.origin}/connect/not-a-nonce`)).status).toBe(404);
  });
});

describe('incident_report prompt and runbook resource template ask for input too', () => {
  it('incident_report: input_required, then the prompt with the answers; a decline gives a template', async () => {
    const r1 = await getPrompt(alice.client, 'incident_report', { service: 'web' });
    expect(InputRequiredResultSchema.safeParse(lastResult(alice.wire)).success).toBe(true);
    const r2 = await getPrompt(
      alice.client,
      'incident_report',
      { service: 'web' },
      { inputResponses: { details: accept({ severity: 'sev2', impact: 'Slow checkouts' }) }, requestState: r1.requestState as string },
    );
    const text = JSON.stringify(r2.messages);
    expect(text).toContain('Severity: sev2');
    expect(text).toContain('Slow checkouts');
    const d1 = await getPrompt(alice.client, 'incident_report', { service: 'web' });
    const d2 = await getPrompt(
      alice.client,
      'incident_report',
      { service: 'web' },
      { inputResponses: { details: { action: 'decline' } }, requestState: d1.requestState as string },
    );
    expect(String(d2.description)).toContain('declined');
    expect(JSON.stringify(d2.messages)).toContain('placeholders');
  });

  it('runbook://{service}: input_required, then the runbook; bound to the URI', async () => {
    const r1 = await readResource(alice.client, 'runbook://web');
    expect(Object.keys(r1.inputRequests as Json)).toEqual(['environment']);
    await expectStateRejected(
      readResource(alice.client, 'runbook://api', {
        inputResponses: { environment: accept({ environment: 'staging' }) },
        requestState: r1.requestState as string,
      }),
    );
    const r2 = await readResource(alice.client, 'runbook://web', {
      inputResponses: { environment: accept({ environment: 'staging' }) },
      requestState: r1.requestState as string,
    });
    const contents = r2.contents as Json[];
    expect(String(contents[0]!.text)).toContain('# web runbook (staging)');
    const wire = lastResult(alice.wire);
    expect(wire.resultType).toBe('complete');
    expect(typeof wire.ttlMs).toBe('number');
    expect(wire.cacheScope).toBe('private');
  });
});

describe('every result carries resultType', () => {
  it('on the wire, for discover, lists, calls and input_required results', async () => {
    const calls: [string, Json][] = [
      ['server/discover', {}],
      ['tools/list', {}],
      ['prompts/list', {}],
      ['resources/templates/list', {}],
      ['tools/call', { name: 'delete_files', arguments: { paths: ['x'] } }],
      ['tools/call', { name: 'summarize', arguments: { text: 'One. Two.' } }],
    ];
    for (const [method, params] of calls) {
      const response = await rawRpc(demo.url, method, params, { token: ALICE });
      expect(response.status, `${method}: ${response.text}`).toBe(200);
      const result = response.body?.result as Json | undefined;
      expect(result, method).toBeDefined();
      expect(['complete', 'input_required'], method).toContain(result!.resultType);
    }
  });

  it('lists the demo tools with their schemas', async () => {
    const { tools } = await alice.client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([
      'connect_account',
      'delete_files',
      'deploy',
      'list_workspace',
      'rollout',
      'send_email',
      'summarize',
    ]);
  });
});
