// The bench's Worker for the Durable Object rows (bundled by esbuild, served by local workerd; see
// src/serverless.ts). `GET /?op=store|raw&c=<concurrency>&n=<ops>&tag=<id prefix>` runs n consumes of fresh ids from
// c concurrent loops inside the Worker and answers when done (the bench times the request):
//   store: @mrtr/store-cloudflare's consume (8 objects, the store's default);
//   raw:   the least a Durable Object consume can be: `INSERT … ON CONFLICT DO NOTHING` in one of 8 objects of a bare
//          class, reached the same way (stub.fetch with a JSON body), answering whether the row was written.
import { createDurableObjectStore, MrtrStoreObject } from '@mrtr/store-cloudflare';

export { MrtrStoreObject };

const SHARDS = 8;

export class RawObject {
  constructor(ctx) {
    this.sql = ctx.storage.sql;
    this.sql.exec('CREATE TABLE IF NOT EXISTS used (id TEXT PRIMARY KEY, exp INTEGER NOT NULL)');
  }

  async fetch(request) {
    const { id, exp } = await request.json();
    const written = this.sql.exec('INSERT INTO used (id, exp) VALUES (?, ?) ON CONFLICT DO NOTHING', id, exp).rowsWritten;
    return Response.json({ first: written > 0 }); // the primary key index counts as a row written too
  }
}

/** FNV-1a, as the store picks its object. */
const shardOf = (text) => {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % SHARDS;
};

let store;
let rawIds;

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const op = url.searchParams.get('op') ?? 'store';
    const c = Number(url.searchParams.get('c') ?? 1);
    const n = Number(url.searchParams.get('n') ?? 64);
    const tag = url.searchParams.get('tag') ?? 'x';
    store ??= createDurableObjectStore({ objects: env.STORE, namespace: 'bench' });
    rawIds ??= Array.from({ length: SHARDS }, (_, shard) => env.RAW.idFromName(`raw/${shard}`));
    const exp = Date.now() + 600_000;
    let next = 0;
    let wrong = 0;
    const consume =
      op === 'raw'
        ? async (id) => {
            const response = await env.RAW.get(rawIds[shardOf(id)]).fetch('https://raw.internal/', {
              method: 'POST',
              body: JSON.stringify({ id, exp }),
            });
            return (await response.json()).first;
          }
        : (id) => store.consume(id, exp);
    const loop = async () => {
      while (next < n) {
        if ((await consume(`${tag}-${next++}`)) !== true) wrong++;
      }
    };
    await Promise.all(Array.from({ length: c }, loop));
    // A second consume of the first id must be refused (checked on the bench's first request).
    const again = url.searchParams.get('check') === '1' ? await consume(`${tag}-0`) : false;
    return Response.json({ n, wrong, again });
  },
};
