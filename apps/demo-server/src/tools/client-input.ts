/** The tools that use what the client offers: summarize (sampling), list_workspace (roots), connect_account (URL-mode elicitation). */
import type { McpServer } from '@modelcontextprotocol/server';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import * as z from 'zod/v4';
import { type DemoDeps, text, sleep, samplingText } from './shared.js';

export function registerClientInputTools(server: McpServer, deps: DemoDeps): void {
  const { mrtr } = deps;
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
}
