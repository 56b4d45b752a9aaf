import { type CreateMessageResult, type McpServer, ResourceTemplate, type ServerContext } from '@modelcontextprotocol/server';
import { base64urlEncode, randomBytes } from '@mrtr/core/authoring';
import type { Mrtr } from '@mrtr/mcp-server';
import * as z from 'zod/v4';
import type { ConnectLedger } from './ledger.js';

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

const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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
const ENVIRONMENT_SCHEMA = {
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

const ROLLOUT_INSTANCES = 10;

/** Text of a sampling result (a block or an array of blocks). */
export function samplingText(result: CreateMessageResult): string {
  const blocks = Array.isArray(result.content) ? result.content : [result.content];
  return blocks
    .map((block) => (block !== null && typeof block === 'object' && block.type === 'text' ? block.text : ''))
    .filter((t) => t.length > 0)
    .join('\n');
}

const SERVICE = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'lower-case letters, digits and dashes')
  .describe('Service name, e.g. "web"');

/** The names the demo protects (see {@link demoTargets}). */
export interface DemoTargets {
  tools: string[];
  prompts: string[];
  /** Whether a protected resource (template) is registered. */
  resources: boolean;
}

/**
 * The tools, prompts and resources {@link registerDemo} protects, found by a dry run against an adapter that only
 * records the names (no handler runs, nothing is served): the metrics start at 0 for them.
 */
export function demoTargets(): DemoTargets {
  const found: DemoTargets = { tools: [], prompts: [], resources: false };
  const recorder = {
    registerTool: (_server: McpServer, name: string) => void found.tools.push(name),
    registerPrompt: (_server: McpServer, name: string) => void found.prompts.push(name),
    registerResource: () => void (found.resources = true),
  } as unknown as Mrtr;
  // Handlers alone use the other dependencies, and none runs.
  registerDemo(undefined as unknown as McpServer, { ...({} as DemoDeps), mrtr: recorder });
  return found;
}

/** Registers the realistic tools, the prompt and the resource template. */
export function registerDemo(server: McpServer, deps: DemoDeps): void {
  const { mrtr } = deps;

  // ---------------------------------------------------------------- delete_files: one confirmation
  mrtr.registerTool(
    server,
    'delete_files',
    {
      title: 'Delete files',
      description: 'Deletes files from the (simulated) workspace after the user confirms. Each confirmation is single-use.',
      inputSchema: z.object({
        paths: z.array(z.string().min(1).max(1024)).min(1).max(100).describe('Workspace-relative paths to delete'),
      }),
      annotations: { destructiveHint: true },
    },
    async ({ paths }, _ctx, need) => {
      const list = paths.map((p) => `- ${p}`).join('\n');
      const answer = need.elicit('confirm', {
        message: `Delete ${paths.length} file${paths.length === 1 ? '' : 's'}?\n${list}`,
        requestedSchema: {
          type: 'object',
          properties: { confirm: { type: 'boolean', title: 'Delete these files', description: 'This cannot be undone.' } },
          required: ['confirm'],
        },
      });
      if (answer === undefined) return need.ask();
      if (answer.action === 'decline') return need.fail('Deletion declined: no file was deleted.');
      if (answer.action === 'cancel') return need.fail('Deletion cancelled: no file was deleted.');
      if (!answer.content.confirm) return text('Not confirmed: no file was deleted.');
      deps.effect?.('delete_files', paths.length);
      return {
        ...text(`Deleted ${paths.length} file${paths.length === 1 ? '' : 's'} (simulated):\n${list}`),
        structuredContent: { deleted: paths },
      };
    },
  );

  // ---------------------------------------------------------------- deploy: several rounds
  mrtr.registerTool(
    server,
    'deploy',
    {
      title: 'Deploy a service',
      description:
        'Deploys a service (simulated). Asks for the environment, then a confirmation, and for production the service ' +
        'name typed out. Earlier answers travel only inside the sealed request state.',
      inputSchema: z.object({ service: SERVICE }),
      annotations: { destructiveHint: true },
      // A retried first call (its response lost) with the same key gets the same first question and state: one flow.
      idempotency: true,
    },
    async ({ service }, _ctx, need) => {
      const env = need.elicit('environment', {
        message: `Where should ${service} be deployed?`,
        requestedSchema: ENVIRONMENT_SCHEMA,
      });
      if (env === undefined) return need.ask();
      if (env.action !== 'accept') return need.fail(`Deployment of ${service} ${env.action === 'decline' ? 'declined' : 'cancelled'}.`);
      const environment = env.content.environment;

      const confirm = need.elicit('confirm', {
        message: `Deploy ${service} to ${environment}?`,
        requestedSchema: {
          type: 'object',
          properties: { confirm: { type: 'boolean', title: `Deploy ${service} to ${environment}` } },
          required: ['confirm'],
        },
      });
      if (confirm === undefined) return need.ask();
      if (confirm.action !== 'accept' || !confirm.content.confirm)
        return need.fail(`Deployment of ${service} to ${environment} not confirmed.`);

      if (environment === 'production') {
        const typed = need.elicit('type_service_name', {
          message: `Production deploy: type the service name (${service}) to proceed.`,
          requestedSchema: {
            type: 'object',
            properties: { service: { type: 'string', title: 'Service name', minLength: 1, maxLength: 63 } },
            required: ['service'],
          },
        });
        if (typed === undefined) return need.ask();
        if (typed.action !== 'accept')
          return need.fail(`Production deployment of ${service} ${typed.action === 'decline' ? 'declined' : 'cancelled'}.`);
        if (typed.content.service !== service)
          return need.fail(`The typed name did not match "${service}": production deployment aborted.`);
      }
      const version = base64urlEncode(randomBytes(4));
      deps.effect?.('deploy', 1);
      return {
        ...text(`Deployed ${service} to ${environment} (simulated, release ${version}) after ${need.round} round(s).`),
        structuredContent: { service, environment, release: version, rounds: need.round },
      };
    },
  );

  // ---------------------------------------------------------------- send_email: a first-round write, keyed
  mrtr.registerTool(
    server,
    'send_email',
    {
      title: 'Send an e-mail',
      description:
        'Sends an e-mail (simulated) at once, asking nothing. Idempotent by key: a retry with the same ' +
        '_meta["dev.mrtr/idempotency-key"] (or Idempotency-Key header) and arguments gets the first result, with the ' +
        'same message id, marked _meta["dev.mrtr/replayed"]; nothing is sent twice.',
      inputSchema: z.object({
        to: z.email().max(254).describe('Recipient address'),
        subject: z.string().max(200).describe('Subject line'),
        body: z.string().max(4_000).optional().describe('Message text'),
      }),
      annotations: { destructiveHint: false, idempotentHint: true },
      idempotency: true,
    },
    async ({ to, subject }) => {
      const messageId = `<${base64urlEncode(randomBytes(12))}@mrtr.demo>`;
      deps.effect?.('send_email', 1);
      return { ...text(`Sent "${subject}" to ${to} (simulated), message id ${messageId}.`), structuredContent: { to, subject, messageId } };
    },
  );

  // ---------------------------------------------------------------- rollout: MRTR first, then a task that asks midway
  const waveMs = deps.rolloutWaveMs ?? 1_500;
  mrtr.registerTool(
    server,
    'rollout',
    {
      title: 'Roll out a release',
      description:
        `Rolls a new release of a service out to its ${ROLLOUT_INSTANCES} instances in waves (simulated; runs for seconds, ` +
        'as a task: needs a client with the tasks extension). Asks for the environment first; in production it asks ' +
        'for approval after the canary, while the task runs. Cancel it at any time.',
      inputSchema: z.object({ service: SERVICE }),
      annotations: { destructiveHint: true },
      task: 'required',
      // The production approval is asked during the task: a client that cannot answer it is refused before the
      // environment round, not after the canary.
      taskInput: ['elicitation.form'],
    },
    async ({ service }, _ctx, need) => {
      const env = need.elicit('environment', {
        message: `Roll ${service} out where?`,
        requestedSchema: ENVIRONMENT_SCHEMA,
      });
      if (env === undefined) return need.ask();
      if (env.action !== 'accept') return need.fail(`Rollout of ${service} ${env.action === 'decline' ? 'declined' : 'cancelled'}.`);
      const environment = env.content.environment;
      return need.task(async (task) => {
        const release = base64urlEncode(randomBytes(4));
        const summary = (done: number) => ({ service, environment, release, instances: ROLLOUT_INSTANCES, updated: done });
        await task.status(`canary: release ${release} on 1 of ${ROLLOUT_INSTANCES} instances`);
        await taskSleep(waveMs, task.signal);
        if (environment === 'production') {
          const approval = await task.elicit('approve_rollout', {
            message: `The canary of ${service} (release ${release}) is healthy: error rate 0.1 %, p99 180 ms. Roll out to the other ${ROLLOUT_INSTANCES - 1} instances?`,
            requestedSchema: {
              type: 'object',
              properties: { approve: { type: 'boolean', title: `Roll ${release} out to all of ${service}` } },
              required: ['approve'],
            },
          });
          if (approval.action !== 'accept' || !approval.content.approve) {
            deps.effect?.('rollout', 1);
            return {
              ...text(`Rollout of ${service} ${release} halted after the canary: 1 of ${ROLLOUT_INSTANCES} instances on the new release.`),
              structuredContent: summary(1),
              isError: true,
            };
          }
        }
        const half = Math.ceil(ROLLOUT_INSTANCES / 2);
        await task.status(`wave 2: release ${release} on ${half} of ${ROLLOUT_INSTANCES} instances`);
        await taskSleep(waveMs, task.signal);
        await task.status(`wave 3: release ${release} on ${ROLLOUT_INSTANCES} of ${ROLLOUT_INSTANCES} instances`);
        await taskSleep(waveMs, task.signal);
        deps.effect?.('rollout', 1);
        return {
          ...text(`Rolled ${service} release ${release} out to ${environment}: ${ROLLOUT_INSTANCES} of ${ROLLOUT_INSTANCES} instances.`),
          structuredContent: summary(ROLLOUT_INSTANCES),
        };
      });
    },
  );

  // ---------------------------------------------------------------- summarize: sampling
  mrtr.registerTool(
    server,
    'summarize',
    {
      title: 'Summarize text',
      description:
        "Summarizes text with the client's model (sampling). Without the sampling capability it degrades to the first sentences.",
      inputSchema: z.object({ text: z.string().min(1).max(20_000).describe('The text to summarize') }),
    },
    async (args, _ctx, need) => {
      if (!need.can('sampling')) {
        const sentences = args.text
          .split(/(?<=[.!?])\s+/)
          .slice(0, 2)
          .join(' ');
        return text(`Summary (first sentences; the client did not offer sampling): ${sentences.slice(0, 500)}`);
      }
      const result = need.sample('summary', {
        messages: [{ role: 'user', content: { type: 'text', text: `Summarize in at most three sentences:\n\n${args.text}` } }],
        systemPrompt: 'You write short, faithful summaries.',
        maxTokens: 300,
      });
      if (result === undefined) return need.ask();
      const summary = samplingText(result);
      if (summary === '') return need.fail('The client returned no text to summarize with.');
      return text(`Summary (by ${result.model}): ${summary}`);
    },
  );

  // ---------------------------------------------------------------- list_workspace: roots
  mrtr.registerTool(
    server,
    'list_workspace',
    {
      title: 'List workspace roots',
      description: 'Lists the roots the client shares (roots/list). Needs the roots capability.',
    },
    async (_args, _ctx, need) => {
      const roots = need.roots('roots');
      if (roots === undefined) return need.ask();
      if (roots.length === 0) return text('The client shares no workspace roots.');
      const lines = roots.map((root) => `- ${root.name === undefined ? root.uri : `${root.name}: ${root.uri}`}`);
      return { ...text(`Workspace roots (${roots.length}):\n${lines.join('\n')}`), structuredContent: { roots } };
    },
  );

  // ---------------------------------------------------------------- connect_account: URL-mode elicitation
  mrtr.registerTool(
    server,
    'connect_account',
    {
      title: 'Connect an account',
      description:
        'Connects a third-party account (simulated OAuth). Sends a URL-mode elicitation to a page this server serves; ' +
        'completion is read from the server-side ledger, never inferred from the client accepting.',
      inputSchema: z.object({ provider: z.enum(['github', 'gitlab', 'slack']).describe('Account to connect') }),
    },
    async ({ provider }, ctx, need) => {
      const message = `Open the link to connect your ${provider} account to the mrtr demo.`;
      let kept = need.kept as { nonce: string; url: string } | undefined;
      if (kept === undefined) {
        const origin = deps.pageOrigin(ctx);
        if (origin === undefined) return need.fail('connect_account needs the HTTP connect page, which this instance does not serve.');
        if (!need.can('elicitation.url')) {
          // Ask without creating a link: the adapter answers -32021 naming elicitation.url, and sends nothing.
          need.elicitUrl('connect', { message, url: `${origin}/connect/` });
          return need.ask({ missingCapability: 'fail' });
        }
        // The ledger may hand back the caller's live pending link for this provider instead of a new one.
        const nonce = await deps.ledger.create(base64urlEncode(randomBytes(16)), {
          principal: deps.principalOf(ctx),
          provider,
          expiresAtMs: Date.now() + deps.linkTtlMs,
        });
        kept = { nonce, url: `${origin}/connect/${nonce}` };
        need.keep(kept);
      }
      const answer = need.elicitUrl('connect', { message, url: kept.url });
      if (answer === undefined) return need.ask();
      if (answer.action !== 'accept') {
        await deps.ledger.settle(kept.nonce, 'denied');
        return need.fail(`Connecting ${provider} was ${answer.action === 'decline' ? 'declined' : 'cancelled'}.`);
      }
      // `accept` is consent, not completion: the page's outcome is in the ledger.
      const deadline = Date.now() + deps.connectWaitMs;
      let link = await deps.ledger.get(kept.nonce);
      while (link?.status === 'pending' && Date.now() < deadline && !ctx.mcpReq.signal.aborted) {
        await sleep(Math.min(250, Math.max(1, deadline - Date.now())));
        link = await deps.ledger.get(kept.nonce);
      }
      if (link === undefined) return need.fail(`The ${provider} connect link expired. Call connect_account again.`);
      if (link.status === 'denied') return need.fail(`Connecting ${provider} was refused on the connect page.`);
      if (link.status === 'pending') {
        // Asking again past the flow's round limit would end in an opaque -32602: say what happened instead.
        if (need.round > need.maxRounds) {
          return need.fail(`The ${provider} connect page was not completed in time. Call connect_account again for a new link.`);
        }
        need.again('connect');
        return need.ask();
      }
      return { ...text(`Connected your ${provider} account (simulated).`), structuredContent: { provider, connected: true } };
    },
  );

  // ---------------------------------------------------------------- incident_report: a prompt that asks
  mrtr.registerPrompt(
    server,
    'incident_report',
    {
      title: 'Incident report',
      description: 'Builds an incident-report prompt; asks the user for severity, impact and status first.',
      argsSchema: z.object({ service: SERVICE }),
    },
    async ({ service }, _ctx, need) => {
      const details = need.elicit('details', {
        message: `Incident on ${service}: a few details for the report.`,
        requestedSchema: {
          type: 'object',
          properties: {
            severity: { type: 'string', title: 'Severity', enum: ['sev1', 'sev2', 'sev3'] },
            impact: { type: 'string', title: 'Customer impact', minLength: 1, maxLength: 2000 },
            resolved: { type: 'boolean', title: 'Resolved already?' },
            customers: { type: 'integer', title: 'Customers affected (estimate)', minimum: 0, maximum: 1_000_000_000 },
            regions: { type: 'array', title: 'Affected regions', items: { type: 'string', enum: ['eu', 'us', 'apac'] }, maxItems: 3 },
          },
          required: ['severity', 'impact'],
        },
      });
      if (details === undefined) return need.ask();
      if (details.action !== 'accept') {
        return {
          description: `Incident report for ${service} (the user ${details.action === 'decline' ? 'declined' : 'cancelled'} the details)`,
          messages: [
            {
              role: 'user',
              content: {
                type: 'text',
                text: `Draft an incident report template for ${service} with placeholders for severity, impact, timeline and follow-ups.`,
              },
            },
          ],
        };
      }
      const { severity, impact, resolved, customers, regions } = details.content;
      const reach =
        (customers === undefined ? '' : `About ${customers} customer(s) affected. `) +
        (regions === undefined || regions.length === 0 ? '' : `Regions: ${regions.join(', ')}. `);
      return {
        description: `Incident report for ${service}`,
        messages: [
          {
            role: 'user',
            content: {
              type: 'text',
              text:
                `Write a blameless incident report for ${service}. Severity: ${severity}. ` +
                `Customer impact: ${impact}. ${reach}Status: ${resolved === true ? 'resolved' : 'ongoing'}. ` +
                'Include summary, timeline, root cause (if known) and follow-up actions.',
            },
          },
        ],
      };
    },
  );

  // ---------------------------------------------------------------- runbook://{service}: a resource template that asks
  mrtr.registerResource(
    server,
    'runbook',
    new ResourceTemplate('runbook://{service}', { list: undefined }),
    {
      title: 'Service runbook',
      description: 'The runbook of a service; asks which environment first.',
      mimeType: 'text/markdown',
    },
    async (uri, _ctx, need, variables) => {
      const raw = variables?.service;
      const service = typeof raw === 'string' ? raw : Array.isArray(raw) ? raw.join(',') : '';
      if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(service)) {
        return { contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'Unknown service name.' }] };
      }
      const env = need.elicit('environment', {
        message: `Which environment's runbook for ${service}?`,
        requestedSchema: {
          type: 'object',
          properties: { environment: { type: 'string', title: 'Environment', enum: ['staging', 'production'] } },
          required: ['environment'],
        },
      });
      if (env === undefined) return need.ask();
      if (env.action !== 'accept') {
        return {
          contents: [
            {
              uri: uri.href,
              mimeType: 'text/plain',
              text: `No runbook shown: the user ${env.action === 'decline' ? 'declined' : 'cancelled'}.`,
            },
          ],
        };
      }
      const environment = env.content.environment;
      return {
        contents: [
          {
            uri: uri.href,
            mimeType: 'text/markdown',
            text:
              `# ${service} runbook (${environment})\n\n` +
              `1. Check the ${environment} dashboard for ${service}.\n` +
              `2. Roll back with \`deploy ${service}\` to the previous release if error rates rose after a deploy.\n` +
              '3. Page the on-call engineer for sev1/sev2.\n',
          },
        ],
      };
    },
  );
}
