// A small MCP 2026-07-28 server for @mrtr/client's quick start (its README test and the publish check), never for
// production: plain Node, no dependencies, JSON answers over POST, on 127.0.0.1 at a random port. One tool, `deploy`,
// asks a form question (`ok`, a boolean) with a requestState, then answers "Deployed <env>" to an accepted answer.
//
//   node scripts/mcp-stand-in.mjs        prints MCP_URL=… and serves until stopped
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';

const VERSION = '2026-07-28';
const QUESTION = {
  method: 'elicitation/create',
  params: { message: 'Deploy?', requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } },
};
const DEPLOY = {
  name: 'deploy',
  description: 'Deploys after a confirmation',
  inputSchema: { type: 'object', properties: { env: { type: 'string' } } },
};

function answer(method, params) {
  if (method === 'server/discover') {
    return {
      resultType: 'complete',
      supportedVersions: [VERSION],
      capabilities: { tools: {} },
      serverInfo: { name: 'mcp-stand-in', version: '1.0.0' },
      ttlMs: 0,
      cacheScope: 'private',
    };
  }
  if (method === 'tools/list') return { resultType: 'complete', tools: [DEPLOY], ttlMs: 0, cacheScope: 'private' };
  if (method !== 'tools/call' || params?.name !== 'deploy') return { error: { code: -32601, message: 'Method not found' } };
  if (params.requestState !== 'deploy:asked')
    return { resultType: 'input_required', inputRequests: { confirm: QUESTION }, requestState: 'deploy:asked' };
  const confirm = params.inputResponses?.confirm;
  const ok = confirm?.action === 'accept' && confirm.content?.ok === true;
  const env = typeof params.arguments?.env === 'string' ? params.arguments.env : 'default';
  return { resultType: 'complete', content: [{ type: 'text', text: ok ? `Deployed ${env}` : 'Not deployed' }], isError: !ok };
}

/** Starts the stand-in; resolves once it listens. */
export function startMcpStandIn() {
  let requests = 0;
  const server = createServer((req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      let message;
      try {
        message = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res
          .writeHead(400, { 'content-type': 'application/json' })
          .end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
        return;
      }
      if (message.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      requests++;
      const result = answer(message.method, message.params);
      const body = 'error' in result ? { jsonrpc: '2.0', id: message.id, error: result.error } : { jsonrpc: '2.0', id: message.id, result };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}/mcp`,
        get requests() {
          return requests;
        },
        close: () => new Promise((done) => server.close(() => done())),
      });
    });
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const standIn = await startMcpStandIn();
  console.log(`MCP_URL=${standIn.url}`);
}
