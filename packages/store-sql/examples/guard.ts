import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing, MrtrError } from '@mrtr/core';
import { createPostgresStore, createSqliteStore } from '@mrtr/store-sql';

const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // the same ring on every instance
const store = process.env.DATABASE_URL // a fleet shares PostgreSQL; one machine can use an SQLite file
  ? createPostgresStore({ connectionString: process.env.DATABASE_URL, table: 'mrtr_replay' })
  : createSqliteStore({ filename: './mrtr-replay.db' });
await store.ensureSchema(); // idempotent, safe from many processes at once (also run before the first consume)
const guard = createStateGuard({ keys, codec: createHmacCodec, store, audience: 'https://mcp.example.com/mcp' });

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ confirmed: false }, request);
console.log((await guard.open(requestState, request)).data); // first use, on any instance: accepted
await guard.open(requestState, request).catch((error: unknown) => console.log(MrtrError.is(error) && error.code)); // ERR_STATE_REPLAYED
await store.close(); // ends the pool / closes the file the store opened (an injected pool or database is left open)
