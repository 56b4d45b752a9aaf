/** A byte stream as the WHATWG streams API offers it (a `Request`'s or `Response`'s `body`): what {@link readWithin} reads. */
export interface ByteStreamLike {
  getReader(): {
    read(): Promise<{ done: boolean; value?: Uint8Array | undefined }>;
    cancel(reason?: unknown): Promise<void>;
  };
}

/**
 * The bytes of `stream` when they are at most `maxBytes`, else `undefined`: it reads no further than one chunk past
 * the bound, then cancels the stream (without waiting: a tee branch's cancel settles only once the other branch is
 * done too). For a body an attacker sends or a reply to inspect: its memory is bounded by `maxBytes` and a chunk.
 */
export async function readWithin(stream: ByteStreamLike, maxBytes: number): Promise<Uint8Array | undefined> {
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) throw new RangeError('readWithin: maxBytes must be a non-negative integer');
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (value === undefined) continue;
    size += value.byteLength;
    if (size > maxBytes) {
      reader.cancel().catch(() => {});
      return undefined;
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.byteLength;
  }
  return out;
}
