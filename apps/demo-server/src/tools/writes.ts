/** The write tools: delete_files (one confirmation), deploy (several rounds, keyed), send_email (a first-round write, keyed). */
import type { McpServer } from '@modelcontextprotocol/server';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import * as z from 'zod/v4';
import { type DemoDeps, text, ENVIRONMENT_SCHEMA, SERVICE } from './shared.js';

export function registerWriteTools(server: McpServer, deps: DemoDeps): void {
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
}
