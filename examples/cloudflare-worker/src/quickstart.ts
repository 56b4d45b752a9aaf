// worker.ts: the Worker's main module (it only defines things; workerd or `wrangler dev` serves it)
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createDurableObjectStore, type DurableObjectNamespaceLike, MrtrStoreObject, perIsolate } from '@mrtr/store-cloudflare';

export { MrtrStoreObject }; // the Durable Object class that MRTR_STORE names in wrangler.jsonc

interface Env {
  MRTR_KEYS?: string;
  MRTR_STORE: DurableObjectNamespaceLike;
}

// Secrets arrive in env: built once per isolate, again only when MRTR_KEYS changes; unset → TypeError, never a random key.
const handlerFor = perIsolate('MRTR_KEYS', (keys, env: Env) => {
  const store = createDurableObjectStore({ objects: env.MRTR_STORE }); // single use and safe retry, every isolate
  const mrtr = createMrtr({ keys: KeyRing.parse(keys), codec: createHmacCodec, store, audience: 'https://files.example/mcp' });
  return createMcpHandler(() => new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions }), { legacy: 'reject' });
});

// Pass { authInfo } from your auth (the principal is "sub:" + authInfo.extra.sub); mrtr.registerTool(server, …) as usual.
export default { fetch: (request: Request, env: Env) => handlerFor(env.MRTR_KEYS, env).fetch(request) };
