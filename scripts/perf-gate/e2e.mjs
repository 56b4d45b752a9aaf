// perf-gate workload: one whole two-round flow through the SDK adapter, in process (built dist).
//   e2e.flow  the official client (@modelcontextprotocol/client, input_required auto-fulfilled) calls a tool of an
//             McpServer (@modelcontextprotocol/server) wired with @mrtr/mcp-server (codec-hmac, store-memory) over the
//             SDK's in-memory transport: round 1 answers input_required (a form elicitation and a sealed state), the
//             client answers and retries with the state, round 2 opens and claims it, runs the tool and records
//             the outcome. As apps/bench/src/e2e.ts, without HTTP (its transport is not what this gate watches).
import { counts, ANSWERS, AUDIENCE, measure, now, pkg, QUIET, report, resolveFrom, secret, wanted } from './harness.mjs';

const COUNTS = counts(200, 100);
const PATH = '/srv/app/tmp/cache-1';

if (wanted('e2e.flow')) {
  const { KeyRing } = await import(pkg('core'));
  const { createHmacCodec } = await import(pkg('codec-hmac'));
  const { createMemoryStore } = await import(pkg('store-memory'));
  const { createMrtr } = await import(pkg('mcp-server'));
  const { McpServer, InMemoryTransport } = await import(resolveFrom('packages/mcp-server', '@modelcontextprotocol/server'));
  const { serveStdio } = await import(resolveFrom('packages/mcp-server', '@modelcontextprotocol/server/stdio'));
  const { Client } = await import(resolveFrom('packages/mcp-server', '@modelcontextprotocol/client'));
  const z = await import(resolveFrom('packages/mcp-server', 'zod/v4'));

  const mrtr = createMrtr({
    keys: new KeyRing([{ kid: 'k1', secret: secret('k1') }]),
    codec: createHmacCodec,
    store: createMemoryStore({ maxEntries: 10_000_000, outcomeBudgetBytes: 2 ** 40, now }),
    audience: AUDIENCE,
    unauthenticated: { principal: 'local', recordOutcomes: true },
    outcomeQuota: { maxBytes: Number.MAX_SAFE_INTEGER },
    ...QUIET,
  });
  const confirmSchema = { type: 'object', properties: { ok: { type: 'boolean', title: 'Really?' } }, required: ['ok'] };
  const inputSchema = z.object({ path: z.string() });
  // A fresh McpServer per request, as the SDK's modern-era entries (serveStdio, createMcpHandler) build them.
  const buildServer = () => {
    const server = new McpServer({ name: 'perf-gate', version: '1.0.0' }, { ...mrtr.serverOptions });
    mrtr.registerTool(server, 'delete_files', { inputSchema }, async ({ path }, _ctx, need) => {
      const confirm = need.elicit('confirm', { message: `Delete ${path}?`, requestedSchema: confirmSchema });
      if (!confirm) return need.ask();
      if (confirm.action !== 'accept') return need.fail(`Not deleted: ${confirm.action}`);
      return { content: [{ type: 'text', text: confirm.content.ok ? `Deleted ${path}` : 'Kept.' }] };
    });
    return server;
  };
  const client = new Client(
    { name: 'perf-gate', version: '1.0.0' },
    {
      versionNegotiation: { mode: { pin: '2026-07-28' } },
      capabilities: { elicitation: { form: {} } },
      inputRequired: { autoFulfill: true, maxRounds: 4 },
    },
  );
  client.setRequestHandler('elicitation/create', async () => ANSWERS.confirm);
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  // serveStdio is the SDK's modern-era entry for one message stream; here over the in-memory pair, not stdio.
  const served = serveStdio(buildServer, { transport: serverSide, legacy: 'reject' });
  await client.connect(clientSide);

  const flow = async () => {
    const result = await client.callTool({ name: 'delete_files', arguments: { path: PATH } });
    if (result.isError === true || result.content?.[0]?.text !== `Deleted ${PATH}`) {
      throw new Error(`perf-gate e2e: expected "Deleted ${PATH}", got ${JSON.stringify(result)}`);
    }
  };
  await measure('e2e.flow', COUNTS, flow);
  await client.close();
  await served.close();
}

report();
