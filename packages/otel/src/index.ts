/**
 * @mrtr/otel: OpenTelemetry metrics and spans for MRTR request states, as an `onEvent` hook for `createMrtr`
 * (`@mrtr/mcp-server`) or `createStateGuard` (`@mrtr/core`). Depends only on `@opentelemetry/api`: the
 * application's SDK decides where the data goes. Nothing secret is recorded: events carry no token, key,
 * principal, argument or answer, and flow ids and resource URIs stay off metrics (cardinality).
 */
import type { MrtrEvent } from '@mrtr/core';
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
}

/** The instrumentation scope name of the meter and the tracer. */
export const SCOPE_NAME = '@mrtr/otel';

/** Metric names (OpenTelemetry style; a Prometheus exporter writes `mrtr_flows_started_total`, `mrtr_state_size_bytes`, …). */
export const METRICS = {
  flowsStarted: 'mrtr.flows.started',
  flowsCompleted: 'mrtr.flows.completed',
  statesMinted: 'mrtr.states.minted',
  statesOpened: 'mrtr.states.opened',
  statesRejected: 'mrtr.states.rejected',
  storeErrors: 'mrtr.store.errors',
  answers: 'mrtr.answers',
  stateSize: 'mrtr.state.size',
  stateDuration: 'mrtr.state.duration',
  storeDuration: 'mrtr.store.duration',
  flowRounds: 'mrtr.flow.rounds',
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
} as const;

const SIZE_BUCKETS = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536];
const SECONDS_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const ROUND_BUCKETS = [1, 2, 3, 4, 5, 6, 7, 8, 10, 16, 32];

interface Instruments {
  flowsStarted: Counter;
  flowsCompleted: Counter;
  statesMinted: Counter;
  statesOpened: Counter;
  statesRejected: Counter;
  storeErrors: Counter;
  answers: Counter;
  stateSize: Histogram;
  stateDuration: Histogram;
  storeDuration: Histogram;
  flowRounds: Histogram;
}

function instruments(meter: Meter): Instruments {
  const counter = (name: string, description: string, unit: string): Counter => meter.createCounter(name, { description, unit });
  const histogram = (name: string, description: string, unit: string, buckets: number[]): Histogram =>
    meter.createHistogram(name, { description, unit, advice: { explicitBucketBoundaries: buckets } });
  return {
    flowsStarted: counter(METRICS.flowsStarted, 'Flows whose first state was minted', '{flow}'),
    flowsCompleted: counter(METRICS.flowsCompleted, 'Flows that ended with a result after at least one state', '{flow}'),
    statesMinted: counter(METRICS.statesMinted, 'States sealed', '{state}'),
    statesOpened: counter(METRICS.statesOpened, 'Presented states that passed every check', '{state}'),
    statesRejected: counter(METRICS.statesRejected, 'States refused (open) or not sealed (mint), by error.type', '{state}'),
    storeErrors: counter(METRICS.storeErrors, 'Replay store failures', '{error}'),
    answers: counter(METRICS.answers, 'Answers received, accepted or ignored, by reason', '{answer}'),
    stateSize: histogram(METRICS.stateSize, 'Size of request states, minted and presented', 'By', SIZE_BUCKETS),
    stateDuration: histogram(METRICS.stateDuration, 'Time to open (store included) or mint a state', 's', SECONDS_BUCKETS),
    storeDuration: histogram(METRICS.storeDuration, "Time of the replay store's consume", 's', SECONDS_BUCKETS),
    flowRounds: histogram(METRICS.flowRounds, 'Requests per completed flow', '{round}', ROUND_BUCKETS),
  };
}

/** Low-cardinality attributes (metrics): method, tool or prompt name (never a resource URI), codec. */
function metricAttributes(event: MrtrEvent): Attributes {
  const attributes: Attributes = { [ATTRIBUTES.method]: event.method, [ATTRIBUTES.codec]: event.codec };
  if (event.target !== undefined) {
    if (event.method === 'tools/call') attributes[ATTRIBUTES.toolName] = event.target;
    else if (event.method === 'prompts/get') attributes[ATTRIBUTES.promptName] = event.target;
  }
  return attributes;
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
  if (options === null || typeof options !== 'object') throw new TypeError('createMrtrTelemetry: options must be an object');
  const { meterProvider, tracerProvider } = options;
  if (meterProvider !== undefined && typeof meterProvider?.getMeter !== 'function') {
    throw new TypeError('createMrtrTelemetry: meterProvider must be a MeterProvider');
  }
  if (tracerProvider !== undefined && typeof tracerProvider?.getTracer !== 'function') {
    throw new TypeError('createMrtrTelemetry: tracerProvider must be a TracerProvider');
  }
  const m: Instruments | undefined =
    options.metrics === false ? undefined : instruments((meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE_NAME));
  const tracer: Tracer | undefined = options.traces === false ? undefined : (tracerProvider ?? trace.getTracerProvider()).getTracer(SCOPE_NAME);

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
