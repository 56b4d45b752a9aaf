/**
 * @mrtr/otel: OpenTelemetry metrics and spans for MRTR request states, as an `onEvent` hook for `createMrtr`
 * (`@mrtr/mcp-server`) or `createStateGuard` (`@mrtr/core`). Depends only on `@opentelemetry/api` and `@mrtr/core`: the
 * application's SDK decides where the data goes. Nothing secret is recorded: events carry no token, key,
 * principal, argument or answer, and flow ids and resource URIs stay off metrics (cardinality).
 */
import { MRTR_ERROR_CODES } from '@mrtr/core/errors';
import type { MrtrEvent, OutcomeDropReason } from '@mrtr/core/events';
import { boolOption, isObject, type OptionNames, optionsObject, rejectUnknownOptions } from '@mrtr/core/options';
import {
  type Attributes,
  type Counter,
  context,
  type Histogram,
  type Meter,
  type MeterProvider,
  metrics,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  type TracerProvider,
  trace,
} from '@opentelemetry/api';

/** Options of {@link createMrtrTelemetry}. */
export interface MrtrTelemetryOptions {
  /** Where the instruments come from. @default the global provider (`metrics.getMeterProvider()`) at creation */
  meterProvider?: MeterProvider | undefined;
  /** Where the spans come from. @default the global provider (`trace.getTracerProvider()`) at creation */
  tracerProvider?: TracerProvider | undefined;
  /** Record metrics. @default true */
  metrics?: boolean | undefined;
  /** Record a span per open and per mint. @default true */
  traces?: boolean | undefined;
  /**
   * Label values known at creation: every counter but `mrtr.answers` starts at 0 for each label set they give,
   * so its series exist from the first scrape (`rate()`, `increase()` and absence alerts work from the start).
   * At most {@link MAX_KNOWN_SERIES} series per counter (`RangeError` beyond). @default none (a series appears with its first event)
   */
  known?: MrtrKnownLabels | undefined;
}

/**
 * The label values a server knows at start (see {@link MrtrTelemetryOptions.known}). With T = tools + prompts
 * (+ 1 with `resources`), C = codecs and E = error types, the counters start with T × C series each
 * (`mrtr.flows.started`, `mrtr.flows.completed`, `mrtr.states.minted`, `mrtr.states.opened`), T × C × 2 × E
 * (`mrtr.states.rejected`: `open` and `mint`), T × C × the store codes among E (`mrtr.store.errors`) and T × C × 4
 * (`mrtr.outcomes.dropped`, one per {@link OUTCOME_DROP_REASONS}).
 */
export interface MrtrKnownLabels {
  /** The ids of the codecs served (`StateCodec.id`: `hmac`, `jwe`, `aead`, …); at least one. */
  codecs: readonly string[];
  /** Protected tool names (`tools/call`, `gen_ai.tool.name`). @default [] */
  tools?: readonly string[] | undefined;
  /** Protected prompt names (`prompts/get`, `gen_ai.prompt.name`). @default [] */
  prompts?: readonly string[] | undefined;
  /** Whether protected resources are served (`resources/read`: one label set per codec, URIs stay off metrics). @default false */
  resources?: boolean | undefined;
  /**
   * The `error.type` values `mrtr.states.rejected` starts at 0 for, each with `mrtr.operation` `open` and `mint`;
   * `mrtr.store.errors` starts at 0 for the store codes among them (`ERR_STORE_UNAVAILABLE`, `ERR_STORE_FULL`).
   * @default every code of `MRTR_ERROR_CODES` (`@mrtr/core`)
   */
  errorTypes?: readonly string[] | undefined;
}

/**
 * Most series {@link MrtrTelemetryOptions.known} may start per counter: half the OpenTelemetry SDK's default
 * cardinality limit (2000 per metric), so that label sets not known at start still get series of their own.
 */
export const MAX_KNOWN_SERIES = 1000;

/** The instrumentation scope name of the meter and the tracer. */
export const SCOPE_NAME = '@mrtr/otel';

/** Metric names (OpenTelemetry style; a Prometheus exporter writes `mrtr_flows_started_total`, `mrtr_state_size_bytes`, …). */
export const METRICS = {
  flowsStarted: 'mrtr.flows.started',
  flowsCompleted: 'mrtr.flows.completed',
  statesMinted: 'mrtr.states.minted',
  statesOpened: 'mrtr.states.opened',
  statesRejected: 'mrtr.states.rejected',
  statesRetried: 'mrtr.states.retried',
  storeErrors: 'mrtr.store.errors',
  answers: 'mrtr.answers',
  stateSize: 'mrtr.state.size',
  stateDuration: 'mrtr.state.duration',
  storeDuration: 'mrtr.store.duration',
  flowRounds: 'mrtr.flow.rounds',
  roundsUnknown: 'mrtr.rounds.unknown',
  outcomesDropped: 'mrtr.outcomes.dropped',
  clockSkew: 'mrtr.clock.skew',
} as const;

/** Span names: one per `open` and per `mint`. */
export const SPANS = { open: 'mrtr.state.open', mint: 'mrtr.state.mint' } as const;

/** Attribute keys: OpenTelemetry's MCP and general conventions where they exist, `mrtr.*` for the rest. */
export const ATTRIBUTES = {
  method: 'mcp.method.name',
  toolName: 'gen_ai.tool.name',
  promptName: 'gen_ai.prompt.name',
  resourceUri: 'mcp.resource.uri',
  errorType: 'error.type',
  codec: 'mrtr.codec',
  keyId: 'mrtr.key.id',
  operation: 'mrtr.operation',
  flowId: 'mrtr.flow.id',
  round: 'mrtr.round',
  stateSize: 'mrtr.state.size',
  answerOutcome: 'mrtr.answer.outcome',
  answerReason: 'mrtr.answer.reason',
  answerKind: 'mrtr.answer.kind',
  outcomeReason: 'mrtr.outcome.reason',
} as const;

/** Why an outcome was not kept (`outcome.dropped`'s `reason`): the `mrtr.outcome.reason` values `known` starts at 0. */
export const OUTCOME_DROP_REASONS: readonly OutcomeDropReason[] = Object.freeze([
  'principal_quota',
  'too_large',
  'unsealable',
  'store_refused',
] as const satisfies readonly OutcomeDropReason[]);

const SIZE_BUCKETS = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536];
const SECONDS_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const ROUND_BUCKETS = [1, 2, 3, 4, 5, 6, 7, 8, 10, 16, 32];

interface Instruments {
  flowsStarted: Counter;
  flowsCompleted: Counter;
  statesMinted: Counter;
  statesOpened: Counter;
  statesRejected: Counter;
  statesRetried: Counter;
  storeErrors: Counter;
  answers: Counter;
  stateSize: Histogram;
  stateDuration: Histogram;
  storeDuration: Histogram;
  flowRounds: Histogram;
  roundsUnknown: Counter;
  outcomesDropped: Counter;
  /** The last measured offset from the store's clock, s (read by the observable gauge). */
  clock: { offsetSeconds: number | undefined };
}

function instruments(meter: Meter): Instruments {
  const clock: Instruments['clock'] = { offsetSeconds: undefined };
  meter
    .createObservableGauge(METRICS.clockSkew, {
      description: "This instance's offset from the replay store's clock (the store's minus this instance's), last measured",
      unit: 's',
    })
    .addCallback((result) => {
      if (clock.offsetSeconds !== undefined) result.observe(clock.offsetSeconds);
    });
  const counter = (name: string, description: string, unit: string): Counter => meter.createCounter(name, { description, unit });
  const histogram = (name: string, description: string, unit: string, buckets: number[]): Histogram =>
    meter.createHistogram(name, { description, unit, advice: { explicitBucketBoundaries: buckets } });
  return {
    flowsStarted: counter(METRICS.flowsStarted, 'Flows whose first state was minted', '{flow}'),
    flowsCompleted: counter(METRICS.flowsCompleted, 'Flows that ended with a result after at least one state', '{flow}'),
    statesMinted: counter(METRICS.statesMinted, 'States sealed', '{state}'),
    statesOpened: counter(METRICS.statesOpened, 'Presented states that passed every check', '{state}'),
    statesRejected: counter(METRICS.statesRejected, 'States refused (open) or not sealed (mint), by error.type', '{state}'),
    statesRetried: counter(
      METRICS.statesRetried,
      'Identical retries of a round (same state, principal and answers) answered with its recorded outcome, nothing run again',
      '{state}',
    ),
    storeErrors: counter(METRICS.storeErrors, 'Replay store failures', '{error}'),
    answers: counter(METRICS.answers, 'Answers received, accepted or ignored, by reason', '{answer}'),
    stateSize: histogram(METRICS.stateSize, 'Size of request states, minted and presented', 'By', SIZE_BUCKETS),
    stateDuration: histogram(METRICS.stateDuration, 'Time to open (store included) or mint a state', 's', SECONDS_BUCKETS),
    storeDuration: histogram(METRICS.storeDuration, "Time of the replay store's consume", 's', SECONDS_BUCKETS),
    flowRounds: histogram(METRICS.flowRounds, 'Requests per completed flow', '{round}', ROUND_BUCKETS),
    roundsUnknown: counter(
      METRICS.roundsUnknown,
      'Rounds whose outcome is unknown: the lease lapsed unrecorded (they may have run)',
      '{round}',
    ),
    outcomesDropped: counter(
      METRICS.outcomesDropped,
      'Rounds whose outcome was not kept (its retries are replays), by mrtr.outcome.reason',
      '{round}',
    ),
    clock,
  };
}

/** Low-cardinality attributes (metrics): method, tool or prompt name (never a resource URI), codec. */
function metricAttributes(event: Pick<MrtrEvent, 'method' | 'target' | 'codec'>): Attributes {
  const attributes: Attributes = { [ATTRIBUTES.method]: event.method, [ATTRIBUTES.codec]: event.codec };
  if (event.target !== undefined) {
    if (event.method === 'tools/call') attributes[ATTRIBUTES.toolName] = event.target;
    else if (event.method === 'prompts/get') attributes[ATTRIBUTES.promptName] = event.target;
  }
  return attributes;
}

/**
 * The codes a mint can be refused with (`state.rejected` with `mrtr.operation` `mint`): no principal, the mint quota,
 * the flow's deadline or round limit, a failed or oversized seal, no key that may seal, a skewed clock. The `mint`
 * series of `known` start for these alone; every code starts for `open`.
 */
export const MINT_ERROR_TYPES: readonly string[] = Object.freeze([
  'ERR_PRINCIPAL_REQUIRED',
  'ERR_QUOTA_EXCEEDED',
  'ERR_FLOW_EXPIRED',
  'ERR_FLOW_ROUNDS',
  'ERR_SEAL_FAILED',
  'ERR_STATE_TOO_LARGE',
  'ERR_KEYS_UNAVAILABLE',
  'ERR_CLOCK_SKEW',
]);

/** The replay store's codes (`store.error` events carry one of these). */
const STORE_ERROR_TYPES: readonly string[] = ['ERR_STORE_UNAVAILABLE', 'ERR_STORE_FULL'];

function names(value: unknown, what: string, nonEmpty: boolean): string[] {
  if (!Array.isArray(value) || (nonEmpty && value.length === 0)) {
    throw new TypeError(`createMrtrTelemetry: known.${what} must be ${nonEmpty ? 'a non-empty' : 'an'} array of strings`);
  }
  for (const name of value) {
    if (typeof name !== 'string' || name === '') throw new TypeError(`createMrtrTelemetry: known.${what} must hold non-empty strings`);
  }
  return [...new Set(value as string[])];
}

/** The label sets {@link MrtrTelemetryOptions.known} starts at 0, per counter; validated and bounded. */
const KNOWN_LABELS: OptionNames<MrtrKnownLabels> = { codecs: true, tools: true, prompts: true, resources: true, errorTypes: true };

function knownSeries(known: MrtrKnownLabels): {
  common: Attributes[];
  rejected: Attributes[];
  storeErrors: Attributes[];
  dropped: Attributes[];
} {
  if (!isObject(known)) throw new TypeError('createMrtrTelemetry: known must be an object');
  rejectUnknownOptions('createMrtrTelemetry: known', known, KNOWN_LABELS);
  const codecs = names(known.codecs, 'codecs', true);
  const tools = known.tools === undefined ? [] : names(known.tools, 'tools', false);
  const prompts = known.prompts === undefined ? [] : names(known.prompts, 'prompts', false);
  const resources = boolOption('createMrtrTelemetry: known.resources', known.resources, false);
  const errorTypes = known.errorTypes === undefined ? [...MRTR_ERROR_CODES] : names(known.errorTypes, 'errorTypes', false);
  const targets: { method: string; target: string | undefined }[] = [
    ...tools.map((target) => ({ method: 'tools/call', target })),
    ...prompts.map((target) => ({ method: 'prompts/get', target })),
    ...(resources ? [{ method: 'resources/read', target: undefined }] : []),
  ];
  const mintTypes = errorTypes.filter((code) => MINT_ERROR_TYPES.includes(code));
  const [largest, metric] = [
    [targets.length * codecs.length * (errorTypes.length + mintTypes.length), METRICS.statesRejected] as const,
    [targets.length * codecs.length * OUTCOME_DROP_REASONS.length, METRICS.outcomesDropped] as const,
  ].reduce((a, b) => (b[0] > a[0] ? b : a));
  if (largest > MAX_KNOWN_SERIES) {
    throw new RangeError(`createMrtrTelemetry: known gives ${largest} series of ${metric}, more than ${MAX_KNOWN_SERIES}`);
  }
  const common = targets.flatMap(({ method, target }) => codecs.map((codec) => metricAttributes({ method, target, codec })));
  return {
    common,
    rejected: common.flatMap((attributes) =>
      [['open', errorTypes] as const, ['mint', mintTypes] as const].flatMap(([operation, codes]) =>
        codes.map((code) => ({ ...attributes, [ATTRIBUTES.operation]: operation, [ATTRIBUTES.errorType]: code })),
      ),
    ),
    storeErrors: common.flatMap((attributes) =>
      errorTypes.filter((code) => STORE_ERROR_TYPES.includes(code)).map((code) => ({ ...attributes, [ATTRIBUTES.errorType]: code })),
    ),
    dropped: common.flatMap((attributes) => OUTCOME_DROP_REASONS.map((reason) => ({ ...attributes, [ATTRIBUTES.outcomeReason]: reason }))),
  };
}

/** Span attributes: the metric ones plus the resource URI, key id, short flow id, round and state size. */
function spanAttributes(event: MrtrEvent, tokenBytes: number | undefined): Attributes {
  const attributes = metricAttributes(event);
  if (event.method === 'resources/read' && event.target !== undefined) attributes[ATTRIBUTES.resourceUri] = event.target;
  if (event.kid !== undefined) attributes[ATTRIBUTES.keyId] = event.kid;
  if (event.flow !== undefined) attributes[ATTRIBUTES.flowId] = event.flow;
  if (event.round !== undefined) attributes[ATTRIBUTES.round] = event.round;
  if (tokenBytes !== undefined) attributes[ATTRIBUTES.stateSize] = tokenBytes;
  return attributes;
}

/**
 * Returns an `onEvent` hook recording MRTR metrics and spans through `@opentelemetry/api`. Pass it to
 * `createMrtr({ onEvent })` or `createStateGuard({ onEvent })`. Spans are children of the span active when the
 * event fires (the SDK request's span, with a context manager), and are started `durationMs` before they end.
 * The hook never throws; with no SDK registered everything is a no-op.
 */
export function createMrtrTelemetry(options: MrtrTelemetryOptions = {}): (event: MrtrEvent) => void {
  options = optionsObject('createMrtrTelemetry', options, {
    meterProvider: true,
    tracerProvider: true,
    metrics: true,
    traces: true,
    known: true,
  });
  const recordMetrics = boolOption('createMrtrTelemetry: metrics', options.metrics, true);
  const recordTraces = boolOption('createMrtrTelemetry: traces', options.traces, true);
  const { meterProvider, tracerProvider } = options;
  if (meterProvider !== undefined && typeof meterProvider?.getMeter !== 'function') {
    throw new TypeError('createMrtrTelemetry: meterProvider must be a MeterProvider');
  }
  if (tracerProvider !== undefined && typeof tracerProvider?.getTracer !== 'function') {
    throw new TypeError('createMrtrTelemetry: tracerProvider must be a TracerProvider');
  }
  const zero = options.known === undefined ? undefined : knownSeries(options.known);
  const m: Instruments | undefined = !recordMetrics
    ? undefined
    : instruments((meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE_NAME));
  if (m !== undefined && zero !== undefined) {
    // Adding 0 creates each series at 0: an exporter then reports it before the first event.
    for (const attributes of zero.common) {
      for (const counter of [m.flowsStarted, m.flowsCompleted, m.statesMinted, m.statesOpened, m.statesRetried, m.roundsUnknown]) {
        counter.add(0, attributes);
      }
    }
    for (const attributes of zero.rejected) m.statesRejected.add(0, attributes);
    for (const attributes of zero.storeErrors) m.storeErrors.add(0, attributes);
    for (const attributes of zero.dropped) m.outcomesDropped.add(0, attributes);
  }
  const tracer: Tracer | undefined = !recordTraces ? undefined : (tracerProvider ?? trace.getTracerProvider()).getTracer(SCOPE_NAME);

  const span = (name: string, event: MrtrEvent, durationMs: number, tokenBytes: number | undefined, code?: string): void => {
    const end = performance.timeOrigin + performance.now();
    const attributes = spanAttributes(event, tokenBytes);
    if (code !== undefined) attributes[ATTRIBUTES.errorType] = code;
    const s = tracer!.startSpan(name, { kind: SpanKind.INTERNAL, startTime: end - durationMs, attributes }, context.active());
    if (code !== undefined) s.setStatus({ code: SpanStatusCode.ERROR, message: code });
    s.end(end);
  };

  const record = (event: MrtrEvent): void => {
    switch (event.type) {
      case 'flow.started':
        m?.flowsStarted.add(1, metricAttributes(event));
        return;
      case 'state.minted': {
        const attributes = metricAttributes(event);
        m?.statesMinted.add(1, attributes);
        const op = { ...attributes, [ATTRIBUTES.operation]: 'mint' };
        m?.stateSize.record(event.tokenBytes, op);
        m?.stateDuration.record(event.durationMs / 1000, op);
        if (tracer !== undefined) span(SPANS.mint, event, event.durationMs, event.tokenBytes);
        return;
      }
      case 'state.opened': {
        const attributes = metricAttributes(event);
        m?.statesOpened.add(1, attributes);
        const op = { ...attributes, [ATTRIBUTES.operation]: 'open' };
        m?.stateSize.record(event.tokenBytes, op);
        m?.stateDuration.record(event.durationMs / 1000, op);
        if (event.storeMs !== undefined) m?.storeDuration.record(event.storeMs / 1000, attributes);
        if (tracer !== undefined) span(SPANS.open, event, event.durationMs, event.tokenBytes);
        return;
      }
      case 'state.retried': {
        const attributes = metricAttributes(event);
        m?.statesRetried.add(1, attributes);
        const op = { ...attributes, [ATTRIBUTES.operation]: 'retry' };
        m?.stateSize.record(event.tokenBytes, op);
        m?.stateDuration.record(event.durationMs / 1000, op);
        m?.storeDuration.record(event.storeMs / 1000, attributes);
        if (tracer !== undefined) span(SPANS.open, event, event.durationMs, event.tokenBytes);
        return;
      }
      case 'state.rejected': {
        const attributes = { ...metricAttributes(event), [ATTRIBUTES.operation]: event.operation, [ATTRIBUTES.errorType]: event.code };
        m?.statesRejected.add(1, attributes);
        m?.stateDuration.record(event.durationMs / 1000, attributes);
        if (tracer !== undefined) span(SPANS[event.operation], event, event.durationMs, event.tokenBytes, event.code);
        return;
      }
      case 'store.error': {
        const attributes = { ...metricAttributes(event), [ATTRIBUTES.errorType]: event.code };
        m?.storeErrors.add(1, attributes);
        m?.storeDuration.record(event.storeMs / 1000, attributes);
        return;
      }
      case 'answer.accepted':
      case 'answer.ignored':
        m?.answers.add(1, {
          ...metricAttributes(event),
          [ATTRIBUTES.answerOutcome]: event.type === 'answer.accepted' ? 'accepted' : 'ignored',
          [ATTRIBUTES.answerReason]: event.reason,
          [ATTRIBUTES.answerKind]: event.kind,
        });
        return;
      case 'round.unknown':
        m?.roundsUnknown.add(1, metricAttributes(event));
        return;
      case 'outcome.dropped':
        m?.outcomesDropped.add(1, { ...metricAttributes(event), [ATTRIBUTES.outcomeReason]: event.reason });
        return;
      case 'store.clock':
        if (m !== undefined) m.clock.offsetSeconds = event.offsetMs / 1000;
        return;
      case 'flow.completed': {
        const attributes = metricAttributes(event);
        m?.flowsCompleted.add(1, attributes);
        m?.flowRounds.record(event.round, attributes);
        return;
      }
    }
  };

  return (event) => {
    try {
      record(event);
    } catch {
      // Telemetry must never change the answer.
    }
  };
}
