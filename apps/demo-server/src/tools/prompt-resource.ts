/** incident_report (a prompt that asks) and runbook://{service} (a resource template that asks). */
import { type McpServer, ResourceTemplate } from '@modelcontextprotocol/server';
import * as z from 'zod/v4';
import { type DemoDeps, SERVICE } from './shared.js';

export function registerPromptAndResource(server: McpServer, deps: DemoDeps): void {
  const { mrtr } = deps;
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
