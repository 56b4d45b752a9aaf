/** What the demo's tools share. */
import type { CreateMessageResult, ServerContext } from '@modelcontextprotocol/server';
import type { Mrtr } from '@mrtr/mcp-server';
import type { ConnectLedger } from '../ledger.js';
import * as z from 'zod/v4';

export const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Waits `ms` inside a task: ends early (rejecting) when the task is cancelled, and never keeps the process alive
 * (a cancelled or abandoned task must not delay a clean shutdown).
 */
export const taskSleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    timer.unref?.();
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });

/** How many instances `rollout` updates: a canary, then the rest in two waves. */
/** The environment question of deploy and rollout. */
export const ENVIRONMENT_SCHEMA = {
  type: 'object',
  properties: {
    environment: {
      type: 'string',
      title: 'Environment',
      oneOf: [
        { const: 'staging', title: 'Staging' },
        { const: 'production', title: 'Production' },
      ],
    },
  },
  required: ['environment'],
} as const;

export const ROLLOUT_INSTANCES = 10;

/** Text of a sampling result (a block or an array of blocks). */
export function samplingText(result: CreateMessageResult): string {
  const blocks = Array.isArray(result.content) ? result.content : [result.content];
  return blocks
    .map((block) => (block !== null && typeof block === 'object' && block.type === 'text' ? block.text : ''))
    .filter((t) => t.length > 0)
    .join('\n');
}

export const SERVICE = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'lower-case letters, digits and dashes')
  .describe('Service name, e.g. "web"');

/** What the demo tools need besides the adapter. */
export interface DemoDeps {
  mrtr: Mrtr;
  ledger: ConnectLedger;
  /** The principal the connect page must match (`extra.sub`, else the fixed local/anonymous one). */
  principalOf(ctx: ServerContext): string;
  /** Origin that serves the connect pages for this request (e.g. `http://127.0.0.1:3000`), if any. */
  pageOrigin(ctx: ServerContext): string | undefined;
  /** How long connect_account waits for the page after the client's `accept` before asking again. */
  connectWaitMs: number;
  /** Lifetime of a connect link in ms. */
  linkTtlMs: number;
  /**
   * Called when a destructive tool performs its (simulated) effect: files deleted, a deployment made. The demo
   * counts them on `/metrics` (`mrtr_demo_effects_total`), which shows that a retried round ran once.
   */
  effect?: ((tool: DemoEffect, count: number) => void) | undefined;
  /** How long each wave of `rollout` runs, in ms. @default 1_500 */
  rolloutWaveMs?: number | undefined;
}

/** The tools whose effects the demo counts. */
export type DemoEffect = 'delete_files' | 'deploy' | 'rollout' | 'send_email';
export const DEMO_EFFECTS: readonly DemoEffect[] = ['delete_files', 'deploy', 'rollout', 'send_email'];
