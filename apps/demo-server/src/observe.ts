import type { IncomingMessage, ServerResponse } from 'node:http';
import { MRTR_REJECTION_CODES } from '@mrtr/core/errors';
import type { MrtrEvent } from '@mrtr/core/events';
import { createMrtrTelemetry, type MrtrKnownLabels } from '@mrtr/otel';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { pino } from 'pino';
import { DEMO_EFFECTS, type DemoEffect } from './tools/index.js';

export const LOG_MODES = ['pretty', 'json', 'off'] as const;
export type LogMode = (typeof LOG_MODES)[number];

/** The path of the Prometheus scrape endpoint. */
export const METRICS_PATH = '/metrics';
/** The demo's own counter of tool side effects (Prometheus: `mrtr_demo_effects_total{tool="delete_files"}`). */
export const DEMO_EFFECTS_METRIC = 'mrtr.demo.effects';

/** One log line per state event: only these fields, never a token, key, argument value or answer. */
export interface RoundLine {
  flow: string | undefined;
  round: number | undefined;
  method: string;
  target: string | undefined;
  codec: string;
  kid: string | undefined;
  bytes: number | undefined;
  outcome: 'minted' | 'opened' | 'retried' | 'rejected' | 'store_error' | 'completed';
  code?: string | undefined;
  ms: number | undefined;
}

/** The log line of an event, or `undefined` for events that get none (flow.started, answers). */
export function roundLine(event: MrtrEvent): RoundLine | undefined {
  const at = {
    flow: event.flow,
    round: event.round,
    method: event.method,
    target: event.target,
    codec: event.codec,
    kid: event.kid,
  };
  const ms = (value: number) => Math.round(value * 1000) / 1000;
  switch (event.type) {
    case 'state.minted':
      return { ...at, bytes: event.tokenBytes, outcome: 'minted', ms: ms(event.durationMs) };
    case 'state.opened':
      return { ...at, bytes: event.tokenBytes, outcome: 'opened', ms: ms(event.durationMs) };
    case 'state.retried':
      return { ...at, bytes: event.tokenBytes, outcome: 'retried', ms: ms(event.durationMs) };
    case 'state.rejected':
      return { ...at, bytes: event.tokenBytes, outcome: 'rejected', code: event.code, ms: ms(event.durationMs) };
    case 'store.error':
      return { ...at, bytes: undefined, outcome: 'store_error', code: event.code, ms: ms(event.storeMs) };
    case 'flow.completed':
      return { ...at, bytes: undefined, outcome: 'completed', ms: undefined };
    default:
      return undefined;
  }
}

/** `mrtr-demo: flow 3f2a9c0d1e2b4a5f r2 opened tools/call delete_files (hmac, kid k1, 412 B, 0.41 ms)`. */
export function prettyLine(line: RoundLine): string {
  const details = [
    line.codec,
    line.kid === undefined ? undefined : `kid ${line.kid}`,
    line.bytes === undefined ? undefined : `${line.bytes} B`,
    line.ms === undefined ? undefined : `${line.ms} ms`,
  ].filter((d) => d !== undefined);
  const outcome = line.code === undefined ? line.outcome : `${line.outcome} ${line.code}`;
  return `mrtr-demo: flow ${line.flow ?? '-'} r${line.round ?? '-'} ${outcome} ${line.method} ${line.target ?? '-'} (${details.join(', ')})`;
}

/** Longest run of quoted text (`"…"`) kept from an error message, and of a whole message; the rest is marked. */
export const MAX_QUOTED_CHARS = 200;
export const MAX_MESSAGE_CHARS = 1_000;

// C0 and C1 controls, DEL, line/paragraph separators and the bidi controls (embeddings, overrides, isolates, marks).
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const hex = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/** Makes untrusted text safe for a terminal: every control and bidi character becomes a visible `\uXXXX`. */
export function escapeForTerminal(text: string): string {
  return text.replace(UNSAFE, hex);
}

function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = max;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end--;
  return `${text.slice(0, end)}…[+${text.length - end} chars]`;
}

/** An error message with each quoted run (attacker text the SDK quotes, e.g. params.name) and the whole cut short. */
export function truncateQuoted(message: string, maxQuoted = MAX_QUOTED_CHARS, maxMessage = MAX_MESSAGE_CHARS): string {
  return cut(
    message.replace(/"([^"]*)"/g, (_m, inner: string) => `"${cut(inner, maxQuoted)}"`),
    maxMessage,
  );
}

export interface Observability {
  /** The `onEvent` hook: logs a line per state event (unless `off`) and records the metrics. */
  onEvent(event: MrtrEvent): void;
  /**
   * Logs a server-side error (SDK rejections quote client text such as `params.name`): a JSON line with the
   * message as a field under `--log json`, else one escaped line; quoted text cut at {@link MAX_QUOTED_CHARS}.
   */
  error(error: unknown): void;
  /** Counts a demo tool's (simulated) side effect: `mrtr_demo_effects_total{tool}` on `/metrics`. */
  effect(tool: DemoEffect, count: number): void;
  /** Answers a scrape with the Prometheus text format. */
  serveMetrics(req: IncomingMessage, res: ServerResponse): void;
  close(): Promise<void>;
}

/**
 * Logs through pino (JSON lines; `pretty` reformats each one for a terminal) and records metrics with
 * `@mrtr/otel` into an OpenTelemetry MeterProvider read by the Prometheus exporter (no server of its own:
 * the demo's HTTP server serves `GET /metrics`).
 */
export function createObservability(options: {
  log: LogMode;
  write: (line: string) => void;
  /** The codecs and protected names served: the counters start at 0 for them, so the first scrape has every series. */
  known?: MrtrKnownLabels | undefined;
}): Observability {
  const exporter = new PrometheusExporter({ preventServerStart: true, withoutTargetInfo: true });
  const meterProvider = new MeterProvider({ readers: [exporter] });
  const known = options.known === undefined ? undefined : { errorTypes: MRTR_REJECTION_CODES, ...options.known };
  const telemetry = createMrtrTelemetry({ meterProvider, traces: false, known });
  const effects = meterProvider.getMeter('mrtr-demo').createCounter(DEMO_EFFECTS_METRIC, {
    description: 'Side effects the demo tools performed: files deleted, deployments made',
    unit: '{effect}',
  });
  for (const tool of DEMO_EFFECTS) effects.add(0, { tool });
  const { write } = options;
  const destination = {
    write(json: string): void {
      if (options.log === 'json') {
        // JSON escapes C0 controls only; C1 and bidi characters become \uXXXX too (the same JSON value).
        write(escapeForTerminal(json.trimEnd()));
        return;
      }
      const { level: _l, time: _t, msg, ...line } = JSON.parse(json) as RoundLine & Record<string, unknown>;
      write(msg === 'error' ? `mrtr-demo: error: ${escapeForTerminal(String(line.error))}` : escapeForTerminal(prettyLine(line)));
    },
  };
  const logger =
    options.log === 'off'
      ? undefined
      : pino(
          {
            base: null,
            messageKey: 'msg',
            timestamp: pino.stdTimeFunctions.isoTime,
            formatters: { level: (label) => ({ level: label }) },
          },
          destination,
        );
  return {
    onEvent(event) {
      telemetry(event);
      if (logger === undefined) return;
      const line = roundLine(event);
      if (line === undefined) return;
      const level = line.outcome === 'store_error' ? 'error' : line.outcome === 'rejected' ? 'warn' : 'info';
      logger[level](line, 'mrtr round');
    },
    error(error) {
      const message = truncateQuoted(error instanceof Error ? error.message : String(error));
      if (logger === undefined) write(`mrtr-demo: error: ${escapeForTerminal(message)}`);
      else logger.error({ error: message }, 'error');
    },
    effect(tool, count) {
      effects.add(count, { tool });
    },
    serveMetrics(req, res) {
      exporter.getMetricsRequestHandler(req, res);
    },
    close: () => meterProvider.shutdown(),
  };
}
