// scripts/http-api.mjs, the local API Gateway HTTP API stand-in that `pnpm dev` puts in front of the handler: the
// event it builds (payload format 2.0), the authorizer stand-in, and the handler's result written back.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HttpApiServer, serveHttpApi } from '../scripts/http-api.mjs';

describe('the local HTTP API (payload format 2.0)', () => {
  const events: Record<string, unknown>[] = [];
  let server: HttpApiServer;
  beforeAll(async () => {
    server = await serveHttpApi(
      async (event: Record<string, unknown>, context) => {
        events.push({ ...event, remaining: context.getRemainingTimeInMillis() });
        if ((event as { rawPath: string }).rawPath === '/fail') throw new Error('boom');
        return {
          statusCode: 201,
          headers: { 'content-type': 'text/plain', 'x-one': '1' },
          cookies: ['a=1', 'b=2'],
          body: Buffer.from('héllo').toString('base64'),
          isBase64Encoded: true,
        };
      },
      { authorize: (token) => (token === 'token-of-alice-0123' ? 'alice' : undefined), timeoutMs: 5_000 },
    );
  });
  afterAll(() => server.close());

  it('refuses an unknown or missing bearer token with 401 and never calls the handler', async () => {
    for (const headers of [{}, { authorization: 'Bearer nope' }, { authorization: 'Basic token-of-alice-0123' }]) {
      const response = await fetch(`${server.url}/mcp`, { method: 'POST', headers, body: '{}' });
      expect(response.status).toBe(401);
      expect(await response.json()).toEqual({ message: 'Unauthorized' });
    }
    expect(events).toEqual([]);
  });

  it('turns a request into an API Gateway v2 event and the structured result into the response', async () => {
    const response = await fetch(`${server.url}/mcp/x?a=1&b=two`, {
      method: 'POST',
      headers: { authorization: 'Bearer token-of-alice-0123', 'content-type': 'application/json', cookie: 'c=3; d=4' },
      body: '{"jsonrpc":"2.0"}',
    });
    expect(response.status).toBe(201);
    expect(await response.text()).toBe('héllo');
    expect(response.headers.get('x-one')).toBe('1');
    expect(response.headers.getSetCookie()).toEqual(['a=1', 'b=2']);
    const event = events.at(-1) as { body: string; headers: Record<string, string | undefined>; remaining: number };
    expect(event).toMatchObject({
      version: '2.0',
      routeKey: '$default',
      rawPath: '/mcp/x',
      rawQueryString: 'a=1&b=two',
      queryStringParameters: { a: '1', b: 'two' },
      cookies: ['c=3', 'd=4'],
      isBase64Encoded: true,
      requestContext: { http: { method: 'POST', path: '/mcp/x' }, authorizer: { jwt: { claims: { sub: 'alice' } } } },
    });
    expect(Buffer.from(event.body, 'base64').toString()).toBe('{"jsonrpc":"2.0"}');
    expect(event.headers['content-type']).toBe('application/json');
    expect(event.headers.cookie).toBeUndefined();
    expect(event.remaining).toBeGreaterThan(0);
    expect(event.remaining).toBeLessThanOrEqual(5_000);
  });

  it('answers 500 when the handler throws, as API Gateway does', async () => {
    const response = await fetch(`${server.url}/fail`, { headers: { authorization: 'Bearer token-of-alice-0123' } });
    expect(response.status).toBe(500);
    expect(await response.json()).toEqual({ message: 'Internal Server Error' });
    expect(events.at(-1)).toMatchObject({ rawPath: '/fail', isBase64Encoded: false });
    expect(events.at(-1)).not.toHaveProperty('body');
  });
});
