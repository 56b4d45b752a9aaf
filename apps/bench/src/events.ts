import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing, type RequestContext, type StateGuard } from '@mrtr/core';
import type { MrtrEvent } from '@mrtr/core/events';
import { createMrtrTelemetry } from '@mrtr/otel';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import type { Job } from './harness.js';

/**
 * The cost of events on the guard's hot path: the same guard (hmac codec, no store, small data) opened and minted
 * with no hook, an empty hook, `@mrtr/otel` on the bare API (no SDK: no-op instruments), and `@mrtr/otel` recording
 * into an SDK MeterProvider and TracerProvider (nothing exported during the run).
 */
export interface EventRow {
  id: 'none' | 'empty' | 'otel-noop' | 'otel-sdk';
  label: string;
  guard: StateGuard;
  token: string;
  /** Events the hook saw (the check reads it; `none` has no hook). */
  seen: { count: number };
}

export const EVENT_REQUEST: RequestContext = {
  method: 'tools/call',
  target: 'delete_files',
  arguments: { paths: ['/srv/app/cache/a.txt', '/srv/app/cache/b.txt'] },
  principal: 'sub:alice',
};
const DATA = { a: { confirm: ['pin', { action: 'accept', content: { confirm: true } }] }, p: {} };

export async function setupEvents(): Promise<{ rows: EventRow[]; close(): Promise<void> }> {
  const keys = KeyRing.generate('k1');
  const meterProvider = new MeterProvider({
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
        exportIntervalMillis: 3_600_000,
      }),
    ],
  });
  const tracerProvider = new BasicTracerProvider();
  const noop = createMrtrTelemetry();
  const sdk = createMrtrTelemetry({ meterProvider, tracerProvider });
  const make = async (id: EventRow['id'], label: string, hook: ((e: MrtrEvent) => void) | undefined): Promise<EventRow> => {
    const seen = { count: 0 };
    const counted =
      hook === undefined
        ? undefined
        : (e: MrtrEvent) => {
            seen.count++;
            hook(e);
          };
    const guard = createStateGuard({ keys, codec: createHmacCodec, audience: 'bench', ...(counted !== undefined && { onEvent: counted }) });
    const token = await guard.mint(DATA, EVENT_REQUEST);
    return { id, label, guard, token, seen };
  };
  const rows = [
    await make('none', 'guard without onEvent (not wrapped)', undefined),
    await make('empty', 'guard with an empty onEvent hook', () => {}),
    await make('otel-noop', '@mrtr/otel hook, @opentelemetry/api without an SDK (no-op)', noop),
    await make('otel-sdk', '@mrtr/otel hook into an SDK MeterProvider + TracerProvider (nothing exported)', sdk),
  ];
  return { rows, close: async () => void (await Promise.all([meterProvider.shutdown(), tracerProvider.shutdown()])) };
}

/** Every row opens its token and mints; hooked rows saw their events. Throws otherwise (nothing is timed). */
export async function checkEvents(rows: readonly EventRow[]): Promise<string[]> {
  const out: string[] = [];
  for (const row of rows) {
    const before = row.seen.count;
    const opened = await row.guard.open(row.token, EVENT_REQUEST);
    if (opened.flow.round !== 1) throw new Error(`events ${row.id}: open returned round ${opened.flow.round}`);
    await row.guard.mint(DATA, EVENT_REQUEST);
    const events = row.seen.count - before;
    if (row.id !== 'none' && events !== 3) throw new Error(`events ${row.id}: ${events} events for an open and a mint (expected 3)`);
    out.push(`events ${row.id}: open and mint work${row.id === 'none' ? '' : ', 3 events (opened, flow.started, minted)'}`);
  }
  return out;
}

/** `events|<row>|open` and `events|<row>|mint`: one open of the same valid token (no store) / one round-1 mint. */
export function eventJobs(rows: readonly EventRow[]): Job[] {
  return rows.flatMap((row) => [
    { key: `events|${row.id}|open`, op: () => row.guard.open(row.token, EVENT_REQUEST) },
    { key: `events|${row.id}|mint`, op: () => row.guard.mint(DATA, EVENT_REQUEST) },
  ]);
}
