// A small local stand-in for an API Gateway HTTP API (payload format 2.0) in front of a Lambda handler: each HTTP
// request becomes an `APIGatewayProxyEventV2`, the handler's `APIGatewayProxyStructuredResultV2` becomes the response.
// Like API Gateway it buffers both (no streaming), caps the request body at 10 MB, and runs a JWT authorizer before
// the handler: here a stand-in that maps a bearer token to `claims.sub` (`authorize`), answering 401
// {"message":"Unauthorized"} without calling the handler when it does not know the token. For development only:
// 127.0.0.1, one invocation at a time per request, a timeout per invocation (`context.getRemainingTimeInMillis`).
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

const MAX_BODY = 10 * 1024 * 1024;

/**
 * @param {(event: object, context: object) => Promise<object | string>} handler
 * @param {{ port?: number, authorize: (token: string) => string | undefined, timeoutMs?: number }} options
 * @returns {Promise<{ url: string, close(): Promise<void> }>}
 */
export async function serveHttpApi(handler, { port = 0, authorize, timeoutMs = 30_000 }) {
  const server = createServer(async (req, res) => {
    const chunks = [];
    let size = 0;
    for await (const chunk of req) {
      size += chunk.length;
      if (size > MAX_BODY) {
        res.writeHead(413, { 'content-type': 'application/json' }).end('{"message":"Request Entity Too Large"}');
        req.destroy();
        return;
      }
      chunks.push(chunk);
    }
    const token = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    const sub = token === undefined ? undefined : authorize(token);
    if (sub === undefined) {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' }).end('{"message":"Unauthorized"}');
      return;
    }
    const url = new URL(req.url ?? '/', 'http://localhost');
    const headers = {};
    const cookies = [];
    for (const [name, value] of Object.entries(req.headers)) {
      if (name === 'cookie') cookies.push(...String(value).split(/;\s*/));
      else headers[name] = Array.isArray(value) ? value.join(',') : String(value);
    }
    const now = new Date();
    const event = {
      version: '2.0',
      routeKey: '$default',
      rawPath: url.pathname,
      rawQueryString: url.search.slice(1),
      ...(cookies.length > 0 && { cookies }),
      headers,
      ...(url.search && { queryStringParameters: Object.fromEntries(url.searchParams) }),
      requestContext: {
        accountId: 'anonymous',
        apiId: 'local',
        domainName: headers.host ?? 'localhost',
        domainPrefix: 'local',
        http: {
          method: req.method ?? 'GET',
          path: url.pathname,
          protocol: `HTTP/${req.httpVersion}`,
          sourceIp: req.socket.remoteAddress ?? '127.0.0.1',
          userAgent: headers['user-agent'] ?? '',
        },
        requestId: randomUUID(),
        routeKey: '$default',
        stage: '$default',
        time: now.toISOString(),
        timeEpoch: now.getTime(),
        authorizer: { jwt: { claims: { sub }, scopes: null } },
      },
      ...(size > 0 && { body: Buffer.concat(chunks).toString('base64'), isBase64Encoded: true }),
      ...(size === 0 && { isBase64Encoded: false }),
    };
    const deadline = Date.now() + timeoutMs;
    let timer;
    try {
      const result = await Promise.race([
        handler(event, {
          getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
          awsRequestId: event.requestContext.requestId,
        }),
        new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`Task timed out after ${timeoutMs} ms`)), timeoutMs))),
      ]);
      if (typeof result === 'string' || result?.statusCode === undefined) {
        // API Gateway's inference for a result that is not a structured response: 200, JSON body.
        res.writeHead(200, { 'content-type': 'application/json' }).end(typeof result === 'string' ? result : JSON.stringify(result));
        return;
      }
      const out = { ...(result.headers ?? {}) };
      if (result.cookies?.length) out['set-cookie'] = result.cookies;
      const body = result.body === undefined ? '' : result.isBase64Encoded ? Buffer.from(result.body, 'base64') : result.body;
      res.writeHead(result.statusCode, out).end(body);
    } catch (error) {
      console.error('[http-api] the handler failed:', error);
      res.writeHead(500, { 'content-type': 'application/json' }).end('{"message":"Internal Server Error"}');
    } finally {
      clearTimeout(timer);
    }
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
