import { createHmacCodec } from '@mrtr/codec-hmac';
import {
  createStateGuard,
  generateKey,
  type JsonValue,
  KeyRing,
  MrtrError,
  type ReplayStore,
  type RequestContext,
  type StateGuardOptions,
} from '@mrtr/core';
import { MRTR_ERROR_CODES } from '@mrtr/core/errors';
import type { MrtrEvent } from '@mrtr/core/events';
import { createMemoryStore } from '@mrtr/store-memory';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  type DataPoint,
  type Histogram,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createMrtrTelemetry,
  MAX_KNOWN_SERIES,
  METRICS,
  MINT_ERROR_TYPES,
  type MrtrTelemetryOptions,
  OUTCOME_DROP_REASONS,
  SPANS,
} from '../src/index.js';

const SECRET_ARG = 'argument-value-5c1e';
const request: RequestContext = { method: 'tools/call', target: 'deploy', arguments: { env: SECRET_ARG }, principal: 'alice-91' };
const tool = { 'mcp.method.name': 'tools/call', 'gen_ai.tool.name': 'deploy', 'mrtr.codec': 'hmac' };

const contextManager = new AsyncLocalStorageContextManager();
beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
});
afterAll(() => {
  context.disable();
});

function setup(
  store: ReplayStore | undefined = createMemoryStore(),
  options: MrtrTelemetryOptions = {},
  guardOptions: Partial<StateGuardOptions> = {},
) {
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  // A long interval: data is collected only by forceFlush, never by a timer.
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const spanExporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spanExporter)] });
  const hook = createMrtrTelemetry({ ...options, meterProvider, tracerProvider });
  const events: MrtrEvent[] = [];
  const onEvent = (event: MrtrEvent): void => {
    events.push(event);
    hook(event);
  };
  const secret = generateKey();
  const keys = new KeyRing([{ kid: 'k1', secret }]);
  const guard = createStateGuard({ keys, codec: createHmacCodec, store, audience: 'https://t.example', onEvent, ...guardOptions });
  /** Every metric's points, by name: `[attributes, value]` (histograms: count, sum). */
  const collect = async () => {
    await reader.forceFlush();
    const out = new Map<string, { attributes: Record<string, unknown>; value: unknown }[]>();
    for (const rm of metricExporter.getMetrics().at(-1)?.scopeMetrics ?? []) {
      for (const metric of rm.metrics) {
        const points = (metric.dataPoints as DataPoint<number | Histogram>[]).map((p) => ({
          attributes: p.attributes,
          value: typeof p.value === 'number' ? p.value : { count: p.value.count, sum: p.value.sum },
        }));
        out.set(metric.descriptor.name, points);
      }
    }
    return out;
  };
  const total = (points: { value: unknown }[] | undefined): number =>
    (points ?? []).reduce((n, p) => n + (typeof p.value === 'number' ? p.value : (p.value as { count: number }).count), 0);
  return { guard, events, onEvent, collect, total, spans: () => spanExporter.getFinishedSpans(), tracerProvider, secret, keys };
}

async function code(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (MrtrError.is(error)) return error.code;
    throw error;
  }
  throw new Error('expected a rejection');
}

describe('createMrtrTelemetry', () => {
  it('a full flow: counters, histograms and one span per mint and open, children of the active span', async () => {
    const t = setup();
    const parent = t.tracerProvider.getTracer('test');
    await parent.startActiveSpan('tools/call deploy', async (requestSpan) => {
      const s1 = await t.guard.open(await t.guard.mint({ a: 1 }, request), request);
      const s2 = await t.guard.open(await t.guard.mint({ a: 2 }, request, { continues: s1 }), request);
      // The adapter reports completion (createMrtr does this itself).
      t.onEvent({ type: 'flow.completed', method: 'tools/call', target: 'deploy', codec: 'hmac', flow: 'f', round: 3, kid: s2.kid });
      t.onEvent({
        type: 'answer.accepted',
        method: 'tools/call',
        target: 'deploy',
        codec: 'hmac',
        key: 'ok',
        kind: 'elicitation.form',
        reason: 'answered',
        round: 2,
      });
      requestSpan.end();
    });
    const m = await t.collect();
    expect(m.get(METRICS.flowsStarted)).toEqual([{ attributes: tool, value: 1 }]);
    expect(m.get(METRICS.statesMinted)).toEqual([{ attributes: tool, value: 2 }]);
    expect(m.get(METRICS.statesOpened)).toEqual([{ attributes: tool, value: 2 }]);
    expect(m.get(METRICS.flowsCompleted)).toEqual([{ attributes: tool, value: 1 }]);
    expect(m.get(METRICS.flowRounds)).toEqual([{ attributes: tool, value: { count: 1, sum: 3 } }]);
    expect(m.get(METRICS.answers)).toEqual([
      {
        attributes: {
          ...tool,
          'mrtr.answer.outcome': 'accepted',
          'mrtr.answer.reason': 'answered',
          'mrtr.answer.kind': 'elicitation.form',
        },
        value: 1,
      },
    ]);
    expect(m.get(METRICS.statesRejected)).toBeUndefined();
    const sizes = m.get(METRICS.stateSize)!;
    expect(sizes.map((p) => [p.attributes['mrtr.operation'], (p.value as { count: number }).count])).toEqual([
      ['mint', 2],
      ['open', 2],
    ]);
    const minted = t.events.filter((e) => e.type === 'state.minted').reduce((n, e) => n + e.tokenBytes, 0);
    expect((sizes[0]!.value as { sum: number }).sum).toBe(minted);
    expect(t.total(m.get(METRICS.stateDuration))).toBe(4);
    expect(t.total(m.get(METRICS.storeDuration))).toBe(2);

    const spans = t.spans();
    const request_ = spans.find((s) => s.name === 'tools/call deploy')!;
    const ours = spans.filter((s) => s !== request_);
    expect(ours.map((s) => s.name)).toEqual([SPANS.mint, SPANS.open, SPANS.mint, SPANS.open]);
    const flow = t.events[0]!.flow;
    for (const [i, s] of ours.entries()) {
      expect(s.parentSpanContext?.spanId).toBe(request_.spanContext().spanId);
      expect(s.status.code).toBe(SpanStatusCode.UNSET);
      expect(s.attributes).toEqual({
        ...tool,
        'mrtr.key.id': 'k1',
        'mrtr.flow.id': flow,
        'mrtr.round': [1, 2, 2, 3][i],
        'mrtr.state.size': expect.any(Number),
      });
    }
  });

  it('a replay and a tamper: rejections by error.type, error spans with the code', async () => {
    const t = setup();
    const token = await t.guard.mint(null, request);
    await t.guard.open(token, request);
    expect(await code(t.guard.open(token, request))).toBe('ERR_STATE_REPLAYED');
    // A different MAC: its first character carries six MAC bits, so any other letter is still canonical base64url
    // (changing the last character, which carries padding bits, can make the token malformed instead).
    const mac = token.lastIndexOf('.') + 1;
    const tampered = `${token.slice(0, mac)}${token[mac] === 'A' ? 'B' : 'A'}${token.slice(mac + 1)}`;
    expect(await code(t.guard.open(tampered, request))).toBe('ERR_STATE_INTEGRITY');
    const m = await t.collect();
    expect(m.get(METRICS.statesRejected)).toEqual([
      { attributes: { ...tool, 'mrtr.operation': 'open', 'error.type': 'ERR_STATE_REPLAYED' }, value: 1 },
      { attributes: { ...tool, 'mrtr.operation': 'open', 'error.type': 'ERR_STATE_INTEGRITY' }, value: 1 },
    ]);
    expect(m.get(METRICS.statesOpened)).toEqual([{ attributes: tool, value: 1 }]);
    expect(m.get(METRICS.storeErrors)).toBeUndefined();
    const failed = t.spans().filter((s) => s.status.code === SpanStatusCode.ERROR);
    expect(failed.map((s) => [s.name, s.status.message, s.attributes['error.type']])).toEqual([
      [SPANS.open, 'ERR_STATE_REPLAYED', 'ERR_STATE_REPLAYED'],
      [SPANS.open, 'ERR_STATE_INTEGRITY', 'ERR_STATE_INTEGRITY'],
    ]);
    expect(failed[0]!.attributes['mrtr.flow.id']).toBe(t.events[0]!.flow);
    expect(failed[1]!.attributes['mrtr.flow.id']).toBeUndefined();
  });

  it('an identical retry (admit): counted in mrtr.states.retried, not as opened or rejected, with an open span', async () => {
    const t = setup();
    const token = await t.guard.mint(null, request);
    const answers = { confirm: { action: 'accept' } };
    const first = await t.guard.admit(token, request, answers);
    expect(first.replay).toBe(false);
    if (!first.replay) expect(await first.record({ r: 'done' })).toBe(true);
    const retry = await t.guard.admit(token, request, answers);
    expect(retry).toMatchObject({ replay: true, outcome: { r: 'done' } });
    const m = await t.collect();
    expect(m.get(METRICS.statesRetried)).toEqual([{ attributes: tool, value: 1 }]);
    expect(m.get(METRICS.statesOpened)).toEqual([{ attributes: tool, value: 1 }]);
    expect(m.get(METRICS.statesRejected)).toBeUndefined();
    const retries = m.get(METRICS.stateDuration)?.filter((p) => p.attributes['mrtr.operation'] === 'retry');
    expect(retries).toEqual([{ attributes: { ...tool, 'mrtr.operation': 'retry' }, value: { count: 1, sum: expect.any(Number) } }]);
    expect(t.spans().filter((s) => s.name === SPANS.open)).toHaveLength(2);
  });

  it('an outcome not kept: counted once in mrtr.outcomes.dropped, by mrtr.outcome.reason', async () => {
    const t = setup(createMemoryStore(), {}, { outcomeQuota: { maxBytes: 2_000 } });
    const answers = { confirm: { action: 'accept' } };
    const run = async (outcome: JsonValue): Promise<boolean> => {
      const first = await t.guard.admit(await t.guard.mint(null, request), request, answers);
      if (first.replay) throw new Error('first must run');
      return first.record(outcome);
    };
    expect(await run({ r: 'x'.repeat(3_000) })).toBe(false); // past the principal's outcomeQuota
    expect(await run({ r: 'x'.repeat(64 * 1024) })).toBe(false); // past the store's maxOutcomeBytes
    expect(await run({ r: 'ok' })).toBe(true);
    expect(await run({ r: 'x'.repeat(3_000) })).toBe(false);
    const m = await t.collect();
    const reason = (r: string) => ({ ...tool, 'mrtr.outcome.reason': r });
    expect(m.get(METRICS.outcomesDropped)).toEqual([
      { attributes: reason('principal_quota'), value: 2 },
      { attributes: reason('too_large'), value: 1 },
    ]);
    expect(t.events.filter((e) => e.type === 'outcome.dropped')).toHaveLength(3);
  });

  it('a store outage: a store error and a rejection, each counted once', async () => {
    const down: ReplayStore = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: () => Promise.reject(new Error('ECONNREFUSED')),
      close: async () => {},
    };
    const t = setup(down);
    const token = await t.guard.mint(null, request);
    expect(await code(t.guard.open(token, request))).toBe('ERR_STORE_UNAVAILABLE');
    const m = await t.collect();
    expect(m.get(METRICS.storeErrors)).toEqual([{ attributes: { ...tool, 'error.type': 'ERR_STORE_UNAVAILABLE' }, value: 1 }]);
    expect(m.get(METRICS.statesRejected)).toEqual([
      { attributes: { ...tool, 'mrtr.operation': 'open', 'error.type': 'ERR_STORE_UNAVAILABLE' }, value: 1 },
    ]);
    expect(t.total(m.get(METRICS.storeDuration))).toBe(1);
    expect(m.get(METRICS.statesOpened)).toBeUndefined();
  });

  it('keeps resource URIs and flow ids off metrics, on spans only', async () => {
    const t = setup();
    const read: RequestContext = { method: 'resources/read', target: 'report://42', principal: 'alice-91' };
    await t.guard.open(await t.guard.mint(null, read), read);
    const m = await t.collect();
    const text = JSON.stringify([...m.values()]);
    expect(text).not.toContain('report://42');
    expect(text).not.toContain(t.events[0]!.flow!);
    expect(t.spans()[0]!.attributes['mcp.resource.uri']).toBe('report://42');
  });

  it('records no token, key, principal, argument or data in any attribute', async () => {
    const t = setup();
    const data = { answer: 'answer-value-0d7e' };
    const t1 = await t.guard.mint(data, request);
    const s1 = await t.guard.open(t1, request);
    const t2 = await t.guard.mint(data, request, { continues: s1 });
    await code(t.guard.open(t1, request));
    await code(t.guard.open(`${t2}x`, request));
    await code(t.guard.open(t2, { ...request, arguments: { env: 'other-3e' } }));
    const m = await t.collect();
    const text = JSON.stringify({ metrics: [...m.values()], spans: t.spans().map((s) => [s.name, s.attributes, s.status]) });
    const subkey = Buffer.from((await t.keys.subkey('k1', 'mrtr/principal-tag/v1'))!).toString('base64url');
    for (const secret of [
      t.secret,
      subkey,
      SECRET_ARG,
      'other-3e',
      'alice-91',
      data.answer,
      s1.claims.jti,
      s1.flow.id,
      s1.claims.sub,
      t1,
      t2,
    ]) {
      expect(text).not.toContain(secret);
    }
    for (const part of [...t1.split('.'), ...t2.split('.')].filter((p) => p.length > 8)) expect(text).not.toContain(part);
  });

  // Issue 19: a fresh server exported no mrtr series until its first flow, so rate() and absence alerts saw
  // nothing from the first scrape, and the first increment of each series was lost to rate().
  it('known: every counter but mrtr.answers starts at 0 for the label sets known at start, before any event', async () => {
    const t = setup(undefined, { known: { codecs: ['hmac', 'aead'], tools: ['deploy', 'deploy'], prompts: ['brief'], resources: true } });
    const common = [
      ...['hmac', 'aead'].map((codec) => ({ ...tool, 'mrtr.codec': codec })),
      ...['hmac', 'aead'].map((codec) => ({ 'mcp.method.name': 'prompts/get', 'gen_ai.prompt.name': 'brief', 'mrtr.codec': codec })),
      ...['hmac', 'aead'].map((codec) => ({ 'mcp.method.name': 'resources/read', 'mrtr.codec': codec })),
    ];
    const key = (attributes: Record<string, unknown>) => JSON.stringify(Object.entries(attributes).sort());
    const values = (points: { attributes: Record<string, unknown>; value: unknown }[] | undefined) =>
      new Map((points ?? []).map((p) => [key(p.attributes), p.value]));
    const zeros = (sets: Record<string, unknown>[]) => new Map(sets.map((a) => [key(a), 0]));
    const codes = [...MRTR_ERROR_CODES];
    const rejected = common.flatMap((a) =>
      (
        [
          ['open', codes],
          ['mint', MINT_ERROR_TYPES],
        ] as const
      ).flatMap(([operation, some]) => some.map((code) => ({ ...a, 'mrtr.operation': operation, 'error.type': code }))),
    );
    const storeErrors = common.flatMap((a) => ['ERR_STORE_UNAVAILABLE', 'ERR_STORE_FULL'].map((code) => ({ ...a, 'error.type': code })));

    let m = await t.collect();
    for (const name of [METRICS.flowsStarted, METRICS.flowsCompleted, METRICS.statesMinted, METRICS.statesOpened, METRICS.statesRetried]) {
      expect(values(m.get(name)), name).toEqual(zeros(common));
    }
    expect(values(m.get(METRICS.statesRejected))).toEqual(zeros(rejected));
    expect(m.get(METRICS.statesRejected)).toHaveLength(6 * (MRTR_ERROR_CODES.size + MINT_ERROR_TYPES.length));
    expect(values(m.get(METRICS.storeErrors))).toEqual(zeros(storeErrors));
    const dropped = common.flatMap((a) => OUTCOME_DROP_REASONS.map((reason) => ({ ...a, 'mrtr.outcome.reason': reason })));
    expect(values(m.get(METRICS.outcomesDropped))).toEqual(zeros(dropped));
    expect(m.get(METRICS.outcomesDropped)).toHaveLength(6 * 4);
    // Answers (reason × kind of each question) and histograms (no observation yet) start with no series.
    for (const name of [METRICS.answers, METRICS.stateSize, METRICS.stateDuration, METRICS.storeDuration, METRICS.flowRounds]) {
      expect(m.get(name), name).toBeUndefined();
    }

    // Events count into those very series: no second series for the same labels.
    const token = await t.guard.mint(null, request);
    await t.guard.open(token, request);
    expect(await code(t.guard.open(token, request))).toBe('ERR_STATE_REPLAYED');
    m = await t.collect();
    expect(values(m.get(METRICS.flowsStarted))).toEqual(new Map([...zeros(common), [key(tool), 1]]));
    expect(values(m.get(METRICS.statesOpened))).toEqual(new Map([...zeros(common), [key(tool), 1]]));
    const replayed = key({ ...tool, 'mrtr.operation': 'open', 'error.type': 'ERR_STATE_REPLAYED' });
    expect(values(m.get(METRICS.statesRejected))).toEqual(new Map([...zeros(rejected), [replayed, 1]]));
  });

  it('known: errorTypes narrows the codes, metrics: false starts nothing, and it is validated and bounded', async () => {
    const narrowed = ['ERR_STATE_REPLAYED', 'ERR_STORE_FULL', 'ERR_QUOTA_EXCEEDED'];
    const t = setup(undefined, { known: { codecs: ['hmac'], tools: ['deploy'], errorTypes: narrowed } });
    const m = await t.collect();
    // Every code for `open`; for `mint` only those a mint can be refused with.
    expect(m.get(METRICS.statesRejected)?.map((p) => [p.attributes['mrtr.operation'], p.attributes['error.type'], p.value])).toEqual([
      ['open', 'ERR_STATE_REPLAYED', 0],
      ['open', 'ERR_STORE_FULL', 0],
      ['open', 'ERR_QUOTA_EXCEEDED', 0],
      ['mint', 'ERR_QUOTA_EXCEEDED', 0],
    ]);
    expect(m.get(METRICS.storeErrors)).toEqual([{ attributes: { ...tool, 'error.type': 'ERR_STORE_FULL' }, value: 0 }]);
    // No target known: nothing to start (a series needs its method and codec, and a name for tools and prompts).
    expect((await setup(undefined, { known: { codecs: ['hmac'] } }).collect()).size).toBe(0);
    expect((await setup(undefined, { metrics: false, known: { codecs: ['hmac'], tools: ['deploy'] } }).collect()).size).toBe(0);

    const bad = (known: unknown) => () => createMrtrTelemetry({ known: known as never });
    expect(bad(null)).toThrow(TypeError);
    expect(bad({ tools: ['x'] })).toThrow(/known\.codecs/);
    expect(bad({ codecs: [] })).toThrow(/known\.codecs/);
    expect(bad({ codecs: ['hmac'], tools: 'deploy' })).toThrow(/known\.tools/);
    expect(bad({ codecs: ['hmac'], prompts: [''] })).toThrow(/known\.prompts/);
    expect(bad({ codecs: ['hmac'], resources: 'yes' })).toThrow(/known\.resources/);
    expect(bad({ codecs: ['hmac'], errorTypes: [1] })).toThrow(/known\.errorTypes/);
    // Bounded: the rejection counter's pre-started series stay within MAX_KNOWN_SERIES.
    const perTool = MRTR_ERROR_CODES.size + MINT_ERROR_TYPES.length;
    const fits = Array.from({ length: Math.floor(MAX_KNOWN_SERIES / perTool) }, (_, i) => `t${i}`);
    expect(() => createMrtrTelemetry({ known: { codecs: ['hmac'], tools: fits } })).not.toThrow();
    expect(bad({ codecs: ['hmac'], tools: [...fits, 'one-more'] })).toThrow(RangeError);
    // With few error types, mrtr.outcomes.dropped (a series per reason) is the largest: bounded too.
    const perReason = Array.from({ length: MAX_KNOWN_SERIES / OUTCOME_DROP_REASONS.length }, (_, i) => `t${i}`);
    const narrow = { codecs: ['hmac'], errorTypes: ['ERR_STATE_REPLAYED'] };
    expect(() => createMrtrTelemetry({ known: { ...narrow, tools: perReason } })).not.toThrow();
    expect(bad({ ...narrow, tools: [...perReason, 'one-more'] })).toThrow(
      new RangeError(`createMrtrTelemetry: known gives 1004 series of mrtr.outcomes.dropped, more than ${MAX_KNOWN_SERIES}`),
    );
  });

  it('is a no-op without an SDK, never throws, and validates its options', () => {
    const hook = createMrtrTelemetry();
    expect(() => hook({ type: 'flow.started' } as never)).not.toThrow();
    expect(() => hook(null as never)).not.toThrow();
    expect(() => createMrtrTelemetry({ meterProvider: {} as never })).toThrow(TypeError);
    expect(() => createMrtrTelemetry({ tracerProvider: 1 as never })).toThrow(TypeError);
    expect(() => createMrtrTelemetry(null as never)).toThrow(TypeError);
    expect(() => createMrtrTelemetry([] as never)).toThrow(new TypeError('createMrtrTelemetry: options must be an object'));
    // The switches are booleans (the option validators of @mrtr/core/options): 'no' is not taken for true.
    expect(() => createMrtrTelemetry({ metrics: 'no' as never })).toThrow(new TypeError('createMrtrTelemetry: metrics must be a boolean'));
    expect(() => createMrtrTelemetry({ traces: 0 as never })).toThrow(new TypeError('createMrtrTelemetry: traces must be a boolean'));
    expect(() => createMrtrTelemetry({ known: [] as never })).toThrow(new TypeError('createMrtrTelemetry: known must be an object'));
    expect(trace.getActiveSpan()).toBeUndefined();
  });
});

describe('createMrtrTelemetry options', () => {
  it('refuses an unknown option, naming it and the closest known name (a misspelt switch is never ignored)', () => {
    expect(() => createMrtrTelemetry({ metric: false } as never)).toThrow(
      new TypeError('createMrtrTelemetry: unknown option "metric"; did you mean "metrics"?'),
    );
    expect(() => createMrtrTelemetry({ known: { codecs: ['hmac'], tool: ['x'] } } as never)).toThrow(
      new TypeError('createMrtrTelemetry: known: unknown option "tool"; did you mean "tools"?'),
    );
  });
});
