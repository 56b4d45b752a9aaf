import { createRequire } from 'node:module';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing, MrtrError } from '@mrtr/core';
import { createDynamoStore, createTable } from '@mrtr/store-dynamodb';

// On AWS: `new DynamoDBClient({})` and your table. To try it here: dynalite, a DynamoDB in memory.
const local = createRequire(import.meta.url)('dynalite')({ createTableMs: 0 }).listen(0, '127.0.0.1');
await new Promise((resolve) => local.once('listening', resolve));
const endpoint = `http://127.0.0.1:${local.address().port}`;
const client = new DynamoDBClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
await createTable(client, 'mrtr', { timeToLive: false }); // partition key pk, TTL on ttl, the heavy index
const store = createDynamoStore({ client, tableName: 'mrtr', namespace: 'my-mcp-server' });
const guard = createStateGuard({
  keys: KeyRing.parse(process.env.MRTR_KEYS ?? ''),
  codec: createHmacCodec,
  store,
  audience: 'https://mcp.example.com/mcp',
});

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ confirmed: false }, request);
console.log((await guard.open(requestState, request)).data); // first use, on any instance: accepted
await guard.open(requestState, request).catch((error: unknown) => console.log(MrtrError.is(error) && error.code)); // ERR_STATE_REPLAYED
client.destroy();
local.close();
