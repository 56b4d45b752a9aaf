import { createHash } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { describe, expect, it } from 'vitest';
import { createMrtr, type FormSchema } from '../src/index.js';
import {
  explainFormAnswer,
  validateFormAnswer,
  validateRootsAnswer,
  validateSamplingAnswer,
  validateUrlAnswer,
} from '../src/rounds/answers.js';
import { type NeedInit, NeedState, nativeSha256Utf8, portableSha256Utf8, questionPin } from '../src/rounds/need.js';
import { callTool, connect, fixture } from './harness.js';

/** Default answer limits, as `createMrtr` sets them. */
const L = { maxChars: 4096 };
const ALL: NeedInit['allowed'] = new Set(['elicitation.form', 'elicitation.url', 'sampling', 'sampling.tools', 'roots']);
const init = (over: Omit<NeedInit, 'presupplied' | 'maxAnswerChars' | 'maxRounds'> & Partial<NeedInit>): NeedInit => ({
  maxRounds: 8,
  presupplied: 'ignore',
  maxAnswerChars: 4096,
  ...over,
});

describe('answer pins', () => {
  it('are the first 16 bytes of SHA-256 over the canonical JSON of the question', () => {
    const request = {
      method: 'elicitation/create',
      params: { message: 'Sure?\u00e9\u{1f600}', requestedSchema: { type: 'object', properties: {} } },
    };
    const canonical =
      '{"method":"elicitation/create","params":{"message":"Sure?\u00e9\u{1f600}","requestedSchema":{"properties":{},"type":"object"}}}';
    const expected = createHash('sha256').update(canonical).digest().subarray(0, 16).toString('base64url');
    expect(questionPin(request as never)).toBe(expected);
    expect(questionPin(request as never, portableSha256Utf8)).toBe(expected);
  });

  it('are the same through the native and the portable SHA-256, lone surrogates included (U+FFFD)', () => {
    const native = nativeSha256Utf8();
    expect(native, 'Node has node:crypto through process.getBuiltinModule').toBeTypeOf('function');
    const messages = ['', 'plain', 'caf\u00e9 \u{1f600}', 'lone \ud800 high', 'lone \udc00 low', 'pair \ud83d\ude00', '\u0000\u2028'];
    for (const message of messages) {
      const request = { method: 'elicitation/create', params: { message, requestedSchema: { type: 'object', properties: {} } } };
      expect(questionPin(request as never, native)).toBe(questionPin(request as never, portableSha256Utf8));
    }
    expect(Buffer.from(native!('lone \ud800')).toString('hex')).toBe(createHash('sha256').update('lone \ufffd').digest('hex'));
  });
});

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 2, maxLength: 5 },
    email: { type: 'string', format: 'email' },
    site: { type: 'string', format: 'uri' },
    day: { type: 'string', format: 'date' },
    at: { type: 'string', format: 'date-time' },
    color: { type: 'string', enum: ['red', 'blue'] },
    size: {
      type: 'string',
      oneOf: [
        { const: 's', title: 'Small' },
        { const: 'l', title: 'Large' },
      ],
    },
    age: { type: 'integer', minimum: 0, maximum: 150 },
    ratio: { type: 'number', minimum: 0, maximum: 1 },
    ok: { type: 'boolean' },
    tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 2 },
    picks: { type: 'array', items: { anyOf: [{ const: 'x' }, { const: 'y' }] } },
  },
  required: ['name'],
} as const satisfies FormSchema;

describe('form answers are validated against requestedSchema', () => {
  const accept = (content: unknown) => ({ action: 'accept', content });
  it.each([
    ['missing required', {}],
    ['wrong type', { name: 12 }],
    ['too short (code points)', { name: 'a' }],
    ['too long (code points)', { name: 'abcdef' }],
    ['bad email', { name: 'ab', email: 'nope' }],
    ['bad uri', { name: 'ab', site: 'no scheme' }],
    ['bad date', { name: 'ab', day: '2026-02-30' }],
    ['bad date-time', { name: 'ab', at: '2026-01-01 10:00' }],
    ['not in enum', { name: 'ab', color: 'green' }],
    ['not in oneOf', { name: 'ab', size: 'm' }],
    ['fraction for integer', { name: 'ab', age: 1.5 }],
    ['below minimum', { name: 'ab', age: -1 }],
    ['above maximum', { name: 'ab', ratio: 2 }],
    ['string for boolean', { name: 'ab', ok: 'true' }],
    ['item not in enum', { name: 'ab', tags: ['z'] }],
    ['too few items', { name: 'ab', tags: [] }],
    ['too many items', { name: 'ab', tags: ['a', 'b', 'c'] }],
    ['item not in anyOf', { name: 'ab', picks: ['q'] }],
    ['NaN-like number', { name: 'ab', ratio: '0.5' }],
  ])('rejects %s', (_label, content) => {
    expect(validateFormAnswer(schema, accept(content), L)).toBeUndefined();
  });

  it('accepts a valid answer, counts code points, and drops unrequested keys', () => {
    const content = {
      name: '\u{1f600}\u{1f600}',
      email: 'a@b.example',
      site: 'https://x.example/p',
      day: '2024-02-29',
      at: '2026-12-02T10:00:00.5+01:00',
      color: 'red',
      size: 'l',
      age: 42,
      ratio: 0.5,
      ok: false,
      tags: ['a', 'c'],
      picks: ['x'],
      __proto__: { polluted: true },
      extra: 'dropped',
    };
    const out = validateFormAnswer(schema, accept(content), L) as { action: string; content: Record<string, unknown> };
    expect(out.action).toBe('accept');
    expect(Object.keys(out.content).sort()).toEqual(
      ['age', 'at', 'color', 'day', 'email', 'name', 'ok', 'picks', 'ratio', 'site', 'size', 'tags'].sort(),
    );
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('passes decline and cancel through without content, and rejects other shapes', () => {
    expect(validateFormAnswer(schema, { action: 'decline', content: { name: 'x' } }, L)).toEqual({ action: 'decline' });
    expect(validateFormAnswer(schema, { action: 'cancel' }, L)).toEqual({ action: 'cancel' });
    for (const bad of [null, 12, 'accept', [], { action: 'ok' }, { action: 'accept' }, { action: 'accept', content: [] }]) {
      expect(validateFormAnswer(schema, bad, L)).toBeUndefined();
    }
  });

  it('validates URL, sampling and roots answers by shape', () => {
    expect(validateUrlAnswer({ action: 'accept', content: { x: 1 } }, L)).toEqual({ action: 'accept' });
    expect(validateUrlAnswer({ action: 'maybe' }, L)).toBeUndefined();
    const sample = { role: 'assistant', content: { type: 'text', text: 'hi' }, model: 'm', stopReason: 'endTurn' };
    expect(validateSamplingAnswer(sample, L)).toEqual(sample);
    expect(validateSamplingAnswer({ ...sample, model: 3 }, L)).toBeUndefined();
    expect(validateSamplingAnswer({ ...sample, role: 'system' }, L)).toBeUndefined();
    expect(validateSamplingAnswer({ ...sample, content: { type: 'text' } }, L)).toBeUndefined();
    expect(validateSamplingAnswer({ ...sample, content: [] }, L)).toBeUndefined();
    expect(validateRootsAnswer({ roots: [{ uri: 'file:///a', name: 'a', extra: 1 }] }, L)).toEqual({
      roots: [{ uri: 'file:///a', name: 'a' }],
    });
    expect(validateRootsAnswer({ roots: [{ uri: 'http://a' }] }, L)).toBeUndefined();
    expect(validateRootsAnswer({ roots: 'file:///a' }, L)).toBeUndefined();
  });
});

describe('NeedState: pins, pending keys and misuse', () => {
  const q = (message: string) =>
    ({ message, requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } }) as const;
  const pinOf = (message: string) => questionPin({ method: 'elicitation/create', params: q(message) } as never);
  const yes = { action: 'accept', content: { ok: true } };

  it('returns an earlier answer only for the same question (a changed question is asked again)', () => {
    const prior = { a: { confirm: [pinOf('Delete /a?'), yes] as [string, never] }, p: {} };
    const same = new NeedState(init({ round: 2, prior, responses: {}, allowed: ALL }));
    expect(same.elicit('confirm', q('Delete /a?'))).toEqual(yes);
    expect(same.pending).toEqual([]);
    const changed = new NeedState(init({ round: 2, prior, responses: {}, allowed: ALL }));
    expect(changed.elicit('confirm', q('Delete /b?'))).toBeUndefined();
    expect(changed.pending).toEqual(['confirm']);
    expect(changed.answers.has('confirm')).toBe(false);
  });

  it('ignores this round’s answer to a pending key when it answered another question', () => {
    const prior = { a: {}, p: { confirm: pinOf('v1?') } };
    const need = new NeedState(init({ round: 2, prior, responses: { confirm: yes }, allowed: ALL }));
    expect(need.elicit('confirm', q('v2?'))).toBeUndefined();
    const ok = new NeedState(init({ round: 2, prior, responses: { confirm: yes }, allowed: ALL }));
    expect(ok.elicit('confirm', q('v1?'))).toEqual(yes);
  });

  it('with a state, ignores answers to questions that were not sent (no pre-answering a later round)', () => {
    // Round 1 sent only `env`; the retry also carries an answer to `approve`, which was never shown.
    const prior = { a: {}, p: { env: pinOf('Which environment?') } };
    const need = new NeedState(init({ round: 2, prior, responses: { env: yes, approve: yes }, allowed: ALL }));
    expect(need.elicit('env', q('Which environment?'))).toEqual(yes);
    expect(need.elicit('approve', q('Transfer $10,000?'))).toBeUndefined();
    expect(need.pending).toEqual(['approve']);
  });

  it('with a state, ignores a re-sent answer to a question whose wording changed', () => {
    const prior = { a: { confirm: [pinOf('Transfer $10?'), yes] as [string, never] }, p: {} };
    const need = new NeedState(init({ round: 3, prior, responses: { confirm: yes }, allowed: ALL }));
    expect(need.elicit('confirm', q('Transfer $10,000?'))).toBeUndefined();
    expect(need.pending).toEqual(['confirm']);
  });

  // Review finding: without a state, any answer under a key counted, so a client completed a confirmation it
  // was never shown (and could replay the call without limit). Omitting the state is now never more
  // permissive than sending one: a pre-supplied answer counts only where the question or server opts in.
  it('without a state (first call), ignores a pre-supplied answer unless the question or server opts in', () => {
    const first = (presupplied: 'ignore' | 'accept') =>
      new NeedState(init({ round: 1, prior: undefined, responses: { confirm: yes }, allowed: ALL, presupplied }));
    const ignored = first('ignore');
    expect(ignored.elicit('confirm', q('Delete /a?'))).toBeUndefined();
    expect(ignored.pending).toEqual(['confirm']);
    expect(first('ignore').elicit('confirm', q('Delete /a?'), { presupplied: 'accept' })).toEqual(yes);
    expect(first('accept').elicit('confirm', q('Delete /a?'))).toEqual(yes);
    expect(first('accept').elicit('confirm', q('Delete /a?'), { presupplied: 'ignore' })).toBeUndefined();
    expect(() => first('ignore').elicit('confirm', q('Delete /a?'), { presupplied: 'yes' } as never)).toThrow(TypeError);
  });

  it('with a state, a question not sent yet takes a pre-supplied answer only under the same opt-in', () => {
    const prior = { a: {}, p: { env: pinOf('Which environment?') } };
    const later = (presupplied: 'ignore' | 'accept') =>
      new NeedState(init({ round: 2, prior, responses: { env: yes, approve: yes }, allowed: ALL, presupplied }));
    const strict = later('ignore');
    expect(strict.elicit('env', q('Which environment?'))).toEqual(yes);
    expect(strict.elicit('approve', q('Transfer $10,000?'))).toBeUndefined();
    const lenient = later('accept');
    expect(lenient.elicit('env', q('Which environment?'))).toEqual(yes);
    expect(lenient.elicit('approve', q('Transfer $10,000?'))).toEqual(yes);
  });

  it('again() re-asks an answered key and drops its answer', () => {
    const need = new NeedState(init({ round: 1, prior: undefined, responses: { confirm: { action: 'decline' } }, allowed: ALL }));
    expect(need.elicit('confirm', q('x?'), { presupplied: 'accept' })).toEqual({ action: 'decline' });
    need.again('confirm');
    expect(need.pending).toEqual(['confirm']);
    expect(need.answers.has('confirm')).toBe(false);
    expect(need.elicit('confirm', q('x?'))).toBeUndefined();
  });

  it('refuses misuse with labelled TypeErrors', () => {
    const need = new NeedState(init({ round: 1, prior: undefined, responses: {}, allowed: new Set() }));
    need.elicit('k', q('one?'));
    expect(() => need.elicit('k', q('two?'))).toThrow(TypeError);
    expect(() => need.again('never')).toThrow(TypeError);
    expect(() => need.elicit('', q('x'))).toThrow(TypeError);
    expect(() => need.elicit('bad key', q('x'))).toThrow(TypeError);
    expect(() => need.elicit('k2', { message: 'x' } as never)).toThrow(TypeError);
    expect(() => need.elicitUrl('u', { message: 'x', url: 'not a url' })).toThrow(TypeError);
    expect(() => need.sample('s', { maxTokens: 1 } as never)).toThrow(TypeError);
    expect(() => need.keep(Number.NaN)).toThrow(TypeError);
    expect(() => need.ask({ missingCapability: 'maybe' } as never)).toThrow(TypeError);
    expect(need.can('elicitation.form')).toBe(false);
  });
});

describe('createMrtr options', () => {
  const keys = KeyRing.generate();
  const codec = createHmacCodec(keys);
  it.each([
    ['no options', undefined],
    ['bad unauthenticated', { codec, keys, audience: 'a', unauthenticated: 'allow' }],
    ['empty fixed principal', { codec, keys, audience: 'a', unauthenticated: { principal: '' } }],
    ['principal not a function', { codec, keys, audience: 'a', principal: 'alice' }],
    ['onReject not a function', { codec, keys, audience: 'a', onReject: true }],
    ['bad missingCapability', { codec, keys, audience: 'a', missingCapability: 'ignore' }],
    ['no audience', { codec, keys }],
    ['no codec', { keys, audience: 'a' }],
  ])('%s → TypeError', (_label, options) => {
    expect(() => createMrtr(options as never)).toThrow(TypeError);
  });
  it.each([
    ['ttlMs 0', { ttlMs: 0 }],
    ['maxRounds 0', { maxRounds: 0 }],
    ['maxTokenBytes above the codec cap', { maxTokenBytes: 10_000_000 }],
  ])('%s → RangeError', (_label, extra) => {
    expect(() => createMrtr({ codec, keys, audience: 'a', ...extra })).toThrow(RangeError);
  });
  it('registration refuses bad servers, names and handlers', () => {
    const mrtr = createMrtr({ codec, keys, audience: 'a' });
    const server = new McpServer({ name: 'x', version: '1' }, { ...mrtr.serverOptions });
    expect(() => mrtr.registerTool(server, '', {}, async () => undefined)).toThrow(TypeError);
    expect(() => mrtr.registerTool({} as never, 't', {}, async () => undefined)).toThrow(TypeError);
    expect(() => mrtr.registerPrompt(server, 'p', {}, 'x' as never)).toThrow(TypeError);
    expect(() => mrtr.registerResource(server, 'r', 'config://x', {}, undefined as never)).toThrow(TypeError);
  });
});

describe('handler results', () => {
  it('returning nothing while questions are pending asks them; a hand-built input_required is refused', async () => {
    const f = fixture();
    const custom = () => {
      const server = new McpServer({ name: 'x', version: '1' }, { ...f.mrtr.serverOptions });
      f.mrtr.registerTool(server, 'implicit', {}, async (_a, _c, need) => {
        const a = need.elicit('a', { message: 'A?', requestedSchema: { type: 'object', properties: { v: { type: 'string' } } } });
        const b = need.elicit('b', { message: 'B?', requestedSchema: { type: 'object', properties: { v: { type: 'string' } } } });
        if (a && b) return { content: [{ type: 'text', text: 'both' }] };
        return undefined;
      });
      f.mrtr.registerTool(server, 'handmade', {}, async () => ({ resultType: 'input_required', requestState: 'unsealed' }) as never);
      f.mrtr.registerTool(server, 'changing', {}, async (_a, _c, need) => {
        version++;
        const a = need.elicit('a', { message: `Version ${version}?`, requestedSchema: { type: 'object', properties: {} } });
        if (!a) return need.ask();
        return { content: [{ type: 'text', text: `answered v${version}` }] };
      });
      return server;
    };
    let version = 0;
    const withExtras = () => {
      const server = custom();
      f.mrtr.registerTool(server, 'memo', {}, async (_a, _c, need) => {
        if (need.round === 1) need.keep({ startedBy: 'round 1', n: 1 });
        const a = need.elicit('a', { message: 'A?', requestedSchema: { type: 'object', properties: {} } });
        if (!a) return need.ask();
        const b = need.elicit('b', { message: 'B?', requestedSchema: { type: 'object', properties: {} } });
        if (!b) return need.ask();
        return { content: [{ type: 'text', text: `${JSON.stringify(need.kept)} @${need.round}` }] };
      });
      f.mrtr.registerPrompt(server, 'plain', {}, async (_a, _c, need) => {
        const a = need.elicit('a', { message: 'A?', requestedSchema: { type: 'object', properties: {} } });
        if (!a) return need.ask();
        return { messages: [{ role: 'user', content: { type: 'text', text: 'plain ok' } }] };
      });
      f.mrtr.registerResource(server, 'fixed', 'config://app', {}, async (uri, _c, need, variables) => {
        const a = need.elicit('a', { message: 'A?', requestedSchema: { type: 'object', properties: {} } });
        if (!a) return need.ask();
        return { contents: [{ uri: uri.href, text: `fixed ${variables === undefined}` }] };
      });
      return server;
    };
    const client = await connect({ ...f, buildServer: withExtras });

    const empty = { a: { action: 'accept', content: {} } };
    const m1 = await callTool(client, 'memo', {});
    const m2 = await callTool(client, 'memo', {}, { inputResponses: empty, requestState: m1.requestState as string });
    const m3 = await callTool(client, 'memo', {}, { inputResponses: { b: empty.a }, requestState: m2.requestState as string });
    expect(m3.content).toEqual([{ type: 'text', text: '{"startedBy":"round 1","n":1} @3' }]);

    const retry = async (method: 'prompts/get' | 'resources/read', params: Record<string, unknown>) => {
      const first = (await client.request({ method, params } as never, { allowInputRequired: true })) as Record<string, unknown>;
      expect(first.resultType).toBe('input_required');
      return (await client.request({ method, params: { ...params, inputResponses: empty, requestState: first.requestState } } as never, {
        allowInputRequired: true,
      })) as Record<string, unknown>;
    };
    const prompt = (await retry('prompts/get', { name: 'plain' })) as { messages: { content: { text: string } }[] };
    expect(prompt.messages[0]!.content.text).toBe('plain ok');
    const resource = await retry('resources/read', { uri: 'config://app' });
    expect(resource.contents).toEqual([{ uri: 'config://app', text: 'fixed true' }]);
    const r1 = await callTool(client, 'implicit', {});
    expect(Object.keys(r1.inputRequests as object)).toEqual(['a', 'b']);
    const accepted = { action: 'accept', content: { v: 'x' } };
    const done = await callTool(
      client,
      'implicit',
      {},
      { inputResponses: { a: accepted, b: accepted }, requestState: r1.requestState as string },
    );
    expect(done.content).toEqual([{ type: 'text', text: 'both' }]);

    const handmade = await callTool(client, 'handmade', {});
    expect(handmade.isError).toBe(true);
    expect(JSON.stringify(handmade.content)).toContain('need.ask()');

    // The question changed between rounds (server state moved on): the old answer is not applied.
    const c1 = await callTool(client, 'changing', {});
    const c2 = await callTool(
      client,
      'changing',
      {},
      { inputResponses: { a: { action: 'accept', content: {} } }, requestState: c1.requestState as string },
    );
    expect(c2.resultType).toBe('input_required');
    expect((c2.inputRequests as Record<string, { params: { message: string } }>).a!.params.message).toBe('Version 2?');
  });
});

describe('why an answer was refused (sent back in front of the question)', () => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', title: 'Name', minLength: 2, maxLength: 5 },
      mail: { type: 'string', format: 'email' },
      size: { type: 'integer', minimum: 1, maximum: 3 },
      env: { type: 'string', enum: ['dev', 'prod'] },
      tags: { type: 'array', items: { type: 'string', enum: ['a', 'b'] }, maxItems: 1 },
      ok: { type: 'boolean' },
    },
    required: ['ok'],
  } as const satisfies FormSchema;
  const why = (content: unknown) => explainFormAnswer(schema, { action: 'accept', content }, L);
  it('names the field (its title when it has one) and the rule, never the answer', () => {
    expect(why({ ok: true, name: 'x' })).toBe('"Name" must be at least 2 characters long.');
    expect(why({ ok: true, name: 'toolong' })).toBe('"Name" must be at most 5 characters long.');
    expect(why({ ok: true, mail: 'secret-not-an-email' })).toBe('"mail" must be a valid email.');
    expect(why({ ok: true, size: 2.5 })).toBe('"size" must be a whole number.');
    expect(why({ ok: true, size: 9 })).toBe('"size" must be at most 3.');
    expect(why({ ok: true, env: 'staging' })).toBe('"env" must be one of "dev", "prod".');
    expect(why({ ok: true, tags: ['a', 'b'] })).toBe('"tags" allows at most 1 choices.');
    expect(why({ ok: 'yes' })).toBe('"ok" must be true or false.');
    expect(why({})).toBe('"ok" is required.');
    expect(explainFormAnswer(schema, { action: 'maybe' }, L)).toBe('The answer could not be read.');
    for (const content of [{ ok: true, name: 'x' }, { ok: 'yes' }, {}])
      expect(validateFormAnswer(schema, { action: 'accept', content }, L)).toBeUndefined();
    expect(validateFormAnswer(schema, { action: 'accept', content: { ok: true, name: 'abc' } }, L)).toEqual({
      action: 'accept',
      content: { ok: true, name: 'abc' },
    });
  });

  it('a refused answer re-asks the question with the reason; a valid answer to it then counts (same pin)', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/r' });
    const r2 = await callTool(
      client,
      'delete_files',
      { path: '/r' },
      { inputResponses: { confirm: { action: 'accept', content: {} } }, requestState: r1.requestState as string },
    );
    expect(r2.resultType).toBe('input_required');
    const asked = (r2.inputRequests as Record<string, { params: { message: string } }>).confirm!.params.message;
    expect(asked).toMatch(/^".+" is required\. Delete \/r\?$/);
    const r3 = await callTool(
      client,
      'delete_files',
      { path: '/r' },
      { inputResponses: { confirm: { action: 'accept', content: { ok: true } } }, requestState: r2.requestState as string },
    );
    expect(r3.resultType).toBeUndefined();
    expect(f.effects).toEqual(['deleted /r']);
  });
});
