import { StoreUnavailableError } from '@mrtr/core/errors';
import type { DurableObjectNamespaceLike } from './binding.js';
import { objectName, shardOf } from './binding.js';

/** The object answered with an error status: it applied nothing (its transaction rolled back, or it never ran). */
export class ObjectRefused extends Error {}

/** Fails closed: `ERR_STORE_UNAVAILABLE`, the cause kept. */
export function fail(cause: unknown): never {
  if (cause instanceof StoreUnavailableError) throw cause;
  throw new StoreUnavailableError({ cause });
}

/** How a store client reaches its objects: by name, through the binding, each call bounded by `timeoutMs`. */
export interface Objects {
  /** Sends `message` to the object holding `key`; rejects with the transport's error or {@link ObjectRefused}. */
  call(key: string, message: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** Sends `message` to object number `shard`. */
  callShard(shard: number, message: Record<string, unknown>): Promise<Record<string, unknown>>;
}

export function objectsOf(
  label: string,
  binding: DurableObjectNamespaceLike,
  kind: 'replay' | 'tasks',
  namespace: string,
  shards: number,
  timeoutMs: number,
): Objects {
  if (binding === null || typeof binding !== 'object' || typeof binding.idFromName !== 'function' || typeof binding.get !== 'function') {
    throw new TypeError(`${label}: objects must be a Durable Object namespace binding (env.MRTR_STORE)`);
  }
  // Ids are plain values (no I/O object), so they are kept; a stub is made per call, in the calling request.
  const ids = Array.from({ length: shards }, (_, shard) => binding.idFromName(objectName(kind, namespace, shard)));
  const objects: Objects = {
    call: (key, message) => objects.callShard(shardOf(key, shards), message),
    async callShard(shard, message) {
      const stub = binding.get(ids[shard]);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer from the store object within ${timeoutMs} ms`)), timeoutMs);
      });
      try {
        const response = await Promise.race([
          stub.fetch('https://mrtr-store.internal/', { method: 'POST', body: JSON.stringify(message) }),
          timeout,
        ]);
        const text = await Promise.race([response.text(), timeout]);
        if (response.status !== 200) throw new ObjectRefused(`the store object answered ${response.status}: ${text.slice(0, 200)}`);
        const parsed: unknown = JSON.parse(text);
        // A 200 means the object ran the request: an answer that is not an object leaves its outcome unknown.
        if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('the store object answered garbage');
        return parsed as Record<string, unknown>;
      } finally {
        clearTimeout(timer);
      }
    },
  };
  return objects;
}
