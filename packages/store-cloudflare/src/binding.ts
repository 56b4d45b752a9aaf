/**
 * The few Workers types the stores use, written structurally so that the package needs no
 * `@cloudflare/workers-types` and a Worker's own `DurableObjectNamespace` binding fits them as it is.
 */

/** What `stub.fetch` answers (a `Response`). */
export interface ObjectResponseLike {
  readonly status: number;
  text(): Promise<string>;
}

/** A Durable Object stub: the stores call only its `fetch`. */
export interface DurableObjectStubLike {
  fetch(input: string, init: { method: string; body: string; headers?: Record<string, string> }): Promise<ObjectResponseLike>;
}

/**
 * A Durable Object namespace binding (`env.MRTR_STORE`, declared in `wrangler.jsonc` for the class
 * {@link MrtrStoreObject}). Only `idFromName` and `get` are used.
 */
export interface DurableObjectNamespaceLike<Id = unknown> {
  idFromName(name: string): Id;
  get(id: Id): DurableObjectStubLike;
}

/** A SQL cursor of `ctx.storage.sql.exec` (only `toArray` is used). */
export interface SqlCursorLike {
  toArray(): Record<string, unknown>[];
}

/** The SQLite storage of a Durable Object (`ctx.storage.sql`), declared with `new_sqlite_classes`. */
export interface SqlStorageLike {
  exec(query: string, ...bindings: (string | number | null)[]): SqlCursorLike;
}

/** The parts of `DurableObjectState` the object uses. */
export interface DurableObjectStateLike {
  readonly storage: {
    readonly sql: SqlStorageLike;
    transactionSync<T>(fn: () => T): T;
  };
}

/** FNV-1a (32 bits) of the UTF-16 code units of `text`: which object of `count` holds an id. Same id, same object. */
export function shardOf(text: string, count: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % count;
}

/** The name of one object of a store: its kind, namespace and shard (the namespace JSON-quoted, so names never collide). */
export const objectName = (kind: 'replay' | 'tasks', namespace: string, shard: number): string =>
  `mrtr/${kind}/v1/${JSON.stringify(namespace)}/${shard}`;
