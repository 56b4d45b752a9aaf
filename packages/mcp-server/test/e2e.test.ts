import { CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema, ResultSchema } from '@modelcontextprotocol/core';
import { ProtocolError } from '@modelcontextprotocol/client';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it } from 'vitest';
import * as z from 'zod/v4';
import { INVALID_STATE_MESSAGE } from '../src/index.js';
import { callTool, connect, fixture, wireLog } from './harness.js';

/**
 * `@modelcontextprotocol/core` 2.4.0 exports no `InputRequiredResultSchema` (neither `.` nor `./internal`;
 * the wire schema lives only inside the client/server bundles). This is the 2026-07-28 schema.ts
 * `InputRequiredResult` built from the official exported parts: `ResultSchema` and the three embedded
 * request schemas, plus the "at least one of inputRequests/requestState" rule.
 */
const InputRequiredResultSchema = ResultSchema.extend({
  resultType: z.literal('input_required'),
  inputRequests: z.record(z.string(), z.union([ElicitRequestSchema, CreateMessageRequestSchema, ListRootsRequestSchema])).optional(),
  requestState: z.string().optional(),
}).refine((r) => (r.inputRequests !== undefined && Object.keys(r.inputRequests).length > 0) || r.requestState !== undefined);

const accept = (content: Record<string, unknown>) => ({ action: 'accept', content });

function lastWireResult(client: Parameters<typeof wireLog.get>[0]): Record<string, unknown> {
  const log = wireLog.get(client)!;
  const last = log[log.length - 1]!;
  return last.result as Record<string, unknown>;
}

async function rejection(promise: Promise<unknown>): Promise<ProtocolError> {
  const error = await promise.then(
    () => {
      throw new Error('expected a JSON-RPC error');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProtocolError);
  return error as ProtocolError;
}

describe('tools/call confirmation over Streamable HTTP (manual mode)', () => {
  it('returns an interim result that validates as InputRequiredResult, and completes on the untampered retry', async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/srv/a' });
    const wire = lastWireResult(client);
    expect(InputRequiredResultSchema.safeParse(wire).success).toBe(true);
    // Negative controls: the composed schema bites.
    expect(InputRequiredResultSchema.safeParse({ ...wire, resultType: 'complete' }).success).toBe(false);
    expect(InputRequiredResultSchema.safeParse({ resultType: 'input_required' }).success).toBe(false);
    expect(
      InputRequiredResultSchema.safeParse({ ...wire, inputRequests: { confirm: { method: 'elicitation/create', params: {} } } }).success,
    ).toBe(false);
    expect(wire.resultType).toBe('input_required');
    expect(Object.keys(wire.inputRequests as object)).toEqual(['confirm']);
    expect(typeof wire.requestState).toBe('string');
    expect(r1.requestState).toBe(wire.requestState);
    expect(f.effects).toEqual([]);

    const r2 = await callTool(
      client,
      'delete_files',
      { path: '/srv/a' },
      { inputResponses: { confirm: accept({ ok: true }) }, requestState: r1.requestState as string },
    );
    expect(lastWireResult(client).resultType).toBe('complete');
    expect(r2.content).toEqual([{ type: 'text', text: 'Deleted /srv/a' }]);
    expect(f.effects).toEqual(['deleted /srv/a']);
    expect(f.rejects).toEqual([]);
  });

  it('rejects the retry with a tampered requestState with -32602 and runs nothing', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/srv/a' });
    const state = r1.requestState as string;
    for (const tampered of [`${state}-TAMPERED`, state.slice(0, -2) + (state.endsWith('AA') ? 'BA' : 'AA')]) {
      const error = await rejection(
        callTool(client, 'delete_files', { path: '/srv/a' }, { inputResponses: { confirm: accept({ ok: true }) }, requestState: tampered }),
      );
      expect(error.code).toBe(-32602);
      expect(error.message).toBe(INVALID_STATE_MESSAGE);
      expect(error.data).toEqual({ reason: 'invalid_request_state' });
    }
    expect(f.effects).toEqual([]);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_MALFORMED', 'ERR_STATE_INTEGRITY']);
  });

  it('completes with auto-fulfil and an elicitation/create handler', async () => {
    const f = fixture({ store: createMemoryStore() });
    const seen: unknown[] = [];
    const client = await connect(f, {
      autoFulfill: true,
      onElicit: (params) => {
        seen.push(params);
        return accept({ ok: true });
      },
    });
    const result = await client.callTool({ name: 'delete_files', arguments: { path: '/srv/b' } });
    expect(result.content).toEqual([{ type: 'text', text: 'Deleted /srv/b' }]);
    expect(seen).toHaveLength(1);
    expect(f.effects).toEqual(['deleted /srv/b']);
  });

  it('runs a two-round flow where round 1 is only in the sealed state (auto-fulfil)', async () => {
    const f = fixture({ store: createMemoryStore() });
    const answers: Record<string, Record<string, unknown>> = {
      'Resolution of #4522?': { resolution: 'Duplicate' },
      'Duplicate of which item?': { duplicateOf: 4301 },
    };
    const asked: string[] = [];
    const client = await connect(f, {
      autoFulfill: true,
      onElicit: (params) => {
        asked.push(params.message as string);
        return accept(answers[params.message as string]!);
      },
    });
    const result = await client.callTool({ name: 'resolve_item', arguments: { id: 4522 } });
    expect(result.content).toEqual([{ type: 'text', text: '#4522 resolved as Duplicate of #4301' }]);
    // Each question was asked once: round 2's retry carried only `duplicate_of`, round 1 came from the state.
    expect(asked).toEqual(['Resolution of #4522?', 'Duplicate of which item?']);
    const retries = wireLog.get(client)!.filter((m) => (m.result as { resultType?: string } | undefined)?.resultType === 'input_required');
    expect(retries).toHaveLength(2);
  });

  it('a decline reaches the handler, which finishes with a clear isError result', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/srv/a' });
    const r2 = await callTool(
      client,
      'delete_files',
      { path: '/srv/a' },
      { inputResponses: { confirm: { action: 'decline' } }, requestState: r1.requestState as string },
    );
    expect(r2).toMatchObject({ isError: true, content: [{ type: 'text', text: 'Cancelled: decline' }] });
    expect(f.effects).toEqual([]);
  });
});

describe('answers', () => {
  it('asks again when an answer has the wrong type, and ignores unrequested keys', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/p' });
    const wrong = await callTool(
      client,
      'delete_files',
      { path: '/p' },
      { inputResponses: { confirm: accept({ ok: 'yes' }), extra: accept({ x: 1 }) }, requestState: r1.requestState as string },
    );
    expect(wrong.resultType).toBe('input_required');
    expect(Object.keys(wrong.inputRequests as object)).toEqual(['confirm']);
    expect(wrong.requestState).not.toBe(r1.requestState);
    const done = await callTool(
      client,
      'delete_files',
      { path: '/p' },
      {
        inputResponses: { confirm: accept({ ok: true, sneaky: 'x' }), extra: accept({ x: 1 }) },
        requestState: wrong.requestState as string,
      },
    );
    expect(done.content).toEqual([{ type: 'text', text: 'Deleted /p' }]);
  });

  // Review finding: a client completed a destructive tool in one request by pre-answering its confirmation
  // (never shown to the user) and replayed that request without limit. Without a state, a pre-supplied
  // answer is now ignored and the question is asked; the replay of the pre-answered call never runs it.
  it('ignores answers pre-supplied on a first round (no state): the question is asked, nothing runs', async () => {
    const f = fixture();
    const client = await connect(f);
    for (let i = 0; i < 3; i++) {
      const asked = await callTool(client, 'delete_files', { path: '/q' }, { inputResponses: { confirm: accept({ ok: true }) } });
      expect(asked.resultType).toBe('input_required');
      expect(Object.keys(asked.inputRequests as object)).toEqual(['confirm']);
    }
    expect(f.effects).toEqual([]);
  });

  it('with presupplied: "accept", takes a first round that carries only inputResponses answering its question', async () => {
    const f = fixture({ presupplied: 'accept' });
    const client = await connect(f);
    const done = await callTool(client, 'delete_files', { path: '/q' }, { inputResponses: { confirm: accept({ ok: true }) } });
    expect(done.content).toEqual([{ type: 'text', text: 'Deleted /q' }]);
    // ...and re-asks when the only answer is under a key it does not use.
    const again = await callTool(client, 'delete_files', { path: '/q' }, { inputResponses: { wrong_key: accept({ ok: true }) } });
    expect(again.resultType).toBe('input_required');
    expect(Object.keys(again.inputRequests as object)).toEqual(['confirm']);
  });

  it('keeps earlier answers in the state and re-asks only what is missing', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 3 });
    expect(Object.keys(r1.inputRequests as object)).toEqual(['step1']);
    const r2 = await callTool(
      client,
      'steps',
      { rounds: 3 },
      { inputResponses: { step1: accept({ ok: true }) }, requestState: r1.requestState as string },
    );
    expect(Object.keys(r2.inputRequests as object)).toEqual(['step2']);
    // step1 answered again with junk: it is not pending, so the sealed answer stands.
    const r3 = await callTool(
      client,
      'steps',
      { rounds: 3 },
      { inputResponses: { step2: accept({ ok: true }), step1: accept({ ok: 'junk' }) }, requestState: r2.requestState as string },
    );
    expect(Object.keys(r3.inputRequests as object)).toEqual(['step3']);
    const r4 = await callTool(
      client,
      'steps',
      { rounds: 3 },
      { inputResponses: { step3: accept({ ok: false }) }, requestState: r3.requestState as string },
    );
    expect(r4.content).toEqual([{ type: 'text', text: 'done in round 4' }]);
  });
});

describe('prompts and resources', () => {
  it('protects prompts/get rounds, and rejects a state presented with other arguments', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = (await client.request(
      { method: 'prompts/get', params: { name: 'greeting', arguments: { tone: 'warm' } } },
      { allowInputRequired: true },
    )) as Record<string, unknown>;
    expect(InputRequiredResultSchema.safeParse(lastWireResult(client)).success).toBe(true);
    const retry = (args: Record<string, string>) =>
      client.request(
        {
          method: 'prompts/get',
          params: {
            name: 'greeting',
            arguments: args,
            inputResponses: { user_name: accept({ name: 'Ada' }) },
            requestState: r1.requestState,
          } as never,
        },
        { allowInputRequired: true },
      );
    const error = await rejection(retry({ tone: 'cold' }));
    expect(error.code).toBe(-32602);
    const done = (await retry({ tone: 'warm' })) as { messages: { content: { text: string } }[] };
    expect(done.messages[0]!.content.text).toBe('Say hello to Ada, warm');
    expect(f.rejects.map((r) => [r.code, r.method, r.target])).toEqual([['ERR_STATE_BINDING', 'prompts/get', 'greeting']]);
  });

  it('protects resources/read rounds bound to the URI', async () => {
    const f = fixture();
    const client = await connect(f);
    const read = (uri: string, extra: Record<string, unknown> = {}) =>
      client.request({ method: 'resources/read', params: { uri, ...extra } as never }, { allowInputRequired: true }) as Promise<
        Record<string, unknown>
      >;
    const r1 = await read('report://7');
    expect(r1.resultType).toBe('input_required');
    const error = await rejection(read('report://8', { inputResponses: { confirm: accept({ ok: true }) }, requestState: r1.requestState }));
    expect(error.code).toBe(-32602);
    const done = await read('report://7', { inputResponses: { confirm: accept({ ok: true }) }, requestState: r1.requestState });
    expect(done.contents).toEqual([{ uri: 'report://7', text: 'report 7' }]);
    expect(f.rejects.map((r) => [r.code, r.method, r.target])).toEqual([['ERR_STATE_BINDING', 'resources/read', 'report://8']]);
  });
});
