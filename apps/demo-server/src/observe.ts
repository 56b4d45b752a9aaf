import type { IncomingMessage, ServerResponse } from 'node:http';
import type { MrtrEvent } from '@mrtr/core';
import { createMrtrTelemetry } from '@mrtr/otel';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { pino } from 'pino';

export const LOG_MODES = ['pretty', 'json', 'off'] as const;
export type LogMode = (typeof LOG_MODES)[number];

/** The path of the Prometheus scrape endpoint. */
export const METRICS_PATH = '/metrics';

/** One log line per state event: only these fields, never a token, key, argument value or answer. */
export interface RoundLine {
  flow: string | undefined;
  round: number | undefined;
  method: string;
  target: string | undefined;
  codec: string;
  kid: string | undefined;
  bytes: number | undefined;
  outcome: 'minted' | 'opened' | 'rejected' | 'store_error' | 'completed';
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

export interface Observability {
  /** The `onEvent` hook: logs a line per state event (unless `off`) and records the metrics. */
  onEvent(event: MrtrEvent): void;
  /** Answers a scrape with the Prometheus text format. */
  serveMetrics(req: IncomingMessage, res: ServerResponse): void;
  close(): Promise<void>;
}

/**
 * Logs through pino (JSON lines; `pretty` reformats each one for a terminal) and records metrics with
 * `@mrtr/otel` into an OpenTelemetry MeterProvider read by the Prometheus exporter (no server of its own:
 * the demo's HTTP server serves `GET /metrics`).
 */
export function createObservability(options: { log: LogMode; write: (line: string) => void }): Observability {
  const exporter = new PrometheusExporter({ preventServerStart: true, withoutTargetInfo: true });
  const meterProvider = new MeterProvider({ readers: [exporter] });
  const telemetry = createMrtrTelemetry({ meterProvider, traces: false });
  const { write } = options;
  const destination = {
    write(json: string): void {
      if (options.log === 'json') {
        write(json.trimEnd());
        return;
      }
      const { level: _l, time: _t, msg: _m, ...line } = JSON.parse(json) as RoundLine & Record<string, unknown>;
      write(prettyLine(line));
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
    serveMetrics(req, res) {
      exporter.getMetricsRequestHandler(req, res);
    },
    close: () => meterProvider.shutdown(),
  };
}
