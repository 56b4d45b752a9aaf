import { McpServer, OAuthError, OAuthErrorCode, type OAuthTokenVerifier, requireBearerAuth } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createHttpHandler } from '@mrtr/mcp-server/http';

const mrtr = createMrtr({
  keys: KeyRing.parse(process.env.MRTR_KEYS ?? ''),
  codec: createHmacCodec,
  audience: 'https://files.example/mcp',
});
const handler = createHttpHandler(
  () => {
    const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
    mrtr.registerTool(server, 'whoami', {}, async (_args, ctx) => ({
      content: [{ type: 'text', text: `You are ${String(ctx.http?.authInfo?.extra?.sub)}` }],
    }));
    return server;
  },
  { allowedHosts: 'localhost' },
);

// Your token check (a JWT library, or introspection at your authorization server); this stand-in knows one token.
const verifier: OAuthTokenVerifier = {
  async verifyAccessToken(token) {
    if (token !== process.env.API_TOKEN) throw new OAuthError(OAuthErrorCode.InvalidToken, 'Unknown token');
    return { token, clientId: 'cli', scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 3600, extra: { sub: 'alice' } };
  },
};
const gate = requireBearerAuth({ verifier });

/** What every runtime mounts: the bearer check, then the handler with the verified user as authInfo. */
export async function fetchMcp(request: Request): Promise<Response> {
  const auth = await gate(request);
  if (auth instanceof Response) return auth; // 401 with the WWW-Authenticate challenge
  return handler.fetch(request, { authInfo: auth }); // mrtr's principal: "sub:" + authInfo.extra.sub
}
export default { fetch: fetchMcp }; // `bun run fetch.ts`, `deno serve`, a Worker
