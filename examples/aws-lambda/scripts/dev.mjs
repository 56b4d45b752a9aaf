#!/usr/bin/env node
// `pnpm dev`: the Lambda handler on this machine, as API Gateway would invoke it, with nothing else to start.
//   1. DynamoDB: dynalite (npm, pure JS, in memory) on 127.0.0.1, the table created as `createTable` declares it;
//   2. the handler: src/handler.ts bundled by esbuild to dist/handler.mjs (node_modules left external), imported once
//      with AWS_ENDPOINT_URL_DYNAMODB pointing at dynalite (the AWS SDK reads it), MRTR_TABLE, MRTR_KEYS;
//   3. the HTTP API: scripts/http-api.mjs turns each HTTP request into an API Gateway HTTP API event (payload format
//      2.0), with a stand-in for the JWT authorizer (a bearer token → `claims.sub`), and the handler's result back.
//
//   node scripts/dev.mjs [--port 3000]
// Environment (all optional): MRTR_KEYS (else a fresh ring each start), DEV_API_TOKENS (JSON {"<token>": "<sub>"},
// else one random token for "alice", printed), MCP_AUDIENCE, LAMBDA_TIMEOUT_MS (30000).
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { generateKey } from '@mrtr/core';
import { createTable } from '@mrtr/store-dynamodb';
import dynalite from 'dynalite';
import { option, stopOnExit } from '../../../scripts/example-harness.mjs';
import { bundle } from './bundle.mjs';
import { serveHttpApi } from './http-api.mjs';

const closers = [];
stopOnExit({ cleanup: () => Promise.all(closers.map((close) => close())) });

// DynamoDB, local: dynalite answers the DynamoDB API over HTTP, in this process.
const dynamoServer = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
await new Promise((resolve) => dynamoServer.listen(0, '127.0.0.1', resolve));
closers.push(() => {
  dynamoServer.closeAllConnections?.();
  return new Promise((resolve) => dynamoServer.close(resolve));
});
const endpoint = `http://127.0.0.1:${dynamoServer.address().port}`;
const env = {
  AWS_ENDPOINT_URL_DYNAMODB: endpoint,
  AWS_REGION: 'us-east-1',
  AWS_ACCESS_KEY_ID: 'local',
  AWS_SECRET_ACCESS_KEY: 'local',
  MRTR_TABLE: process.env.MRTR_TABLE || 'mrtr-local',
  MRTR_KEYS: process.env.MRTR_KEYS || `k1:${generateKey()}`,
};
Object.assign(process.env, env);
const admin = new DynamoDBClient({ endpoint, region: env.AWS_REGION, credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
await createTable(admin, env.MRTR_TABLE, { timeToLive: false }); // dynalite has no TTL; expiry is in every condition anyway
admin.destroy();

// The handler, bundled as `pnpm build` does (scripts/bundle.mjs), imported once.
const { handler } = await import(`${pathToFileURL(await bundle()).href}?t=${Date.now()}`);

let tokens;
if (process.env.DEV_API_TOKENS) {
  tokens = new Map(Object.entries(JSON.parse(process.env.DEV_API_TOKENS)));
} else {
  tokens = new Map([[`dev-${randomBytes(18).toString('base64url')}`, 'alice']]);
}
const server = await serveHttpApi(handler, {
  port: Number(option('port', process.env.PORT ?? '3000')),
  authorize: (token) => tokens.get(token),
  timeoutMs: Number(process.env.LAMBDA_TIMEOUT_MS ?? 30_000),
});
closers.push(() => server.close());

console.log(`DynamoDB (dynalite): ${endpoint}, table ${env.MRTR_TABLE}`);
console.log(`MCP endpoint: ${server.url}/mcp`);
console.log(`Bearer token: ${[...tokens.keys()][0]}`);
console.log('Ready.');
