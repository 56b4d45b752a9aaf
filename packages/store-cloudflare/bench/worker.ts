// The bench Worker: `GET /?op=consume|claim-record&c=<concurrency>&n=<ops>&shards=<n>` runs n operations from c
// concurrent loops against the Durable Object store and answers when done (the caller times the request).
import { createDurableObjectStore, type DurableObjectNamespaceLike, MrtrStoreObject } from '../src/index.js';

export { MrtrStoreObject };

let run = 0;
export default {
  async fetch(request: Request, env: { STORE: DurableObjectNamespaceLike }): Promise<Response> {
    const url = new URL(request.url);
    const op = url.searchParams.get('op') ?? 'consume';
    const c = Number(url.searchParams.get('c') ?? 1);
    const n = Number(url.searchParams.get('n') ?? 1000);
    const shards = Number(url.searchParams.get('shards') ?? 8);
    const store = createDurableObjectStore({ objects: env.STORE, namespace: `bench-${run++}`, shards });
    const exp = Date.now() + 600_000;
    let next = 0;
    let wrong = 0;
    const loop = async (): Promise<void> => {
      while (next < n) {
        const id = `id-${next++}`;
        if (op === 'consume') {
          if ((await store.consume(id, exp)) !== true) wrong++;
        } else {
          const claimed = await store.claim(id, exp, 'fp');
          if (claimed.status !== 'first' || (await store.record(id, 'fp', 'o'.repeat(600))) !== true) wrong++;
        }
      }
    };
    await Promise.all(Array.from({ length: c }, loop));
    return Response.json({ n, wrong });
  },
};
