/**
 * A POST body read once, for both the era decision and the path that serves the request: read up to the body limit
 * when its `content-length` says it fits, and parsed as the SDK's transports parse it.
 */

/** What {@link readPostBody} made of a body. */
export type PostBody =
  /** The body as JSON: hand it on as `parsedBody` (with the request itself, never read again). */
  | { readonly parsedBody: unknown }
  /**
   * A body that is not JSON (empty included), over the limit, or that failed while read: `request` is an equivalent
   * request whose body gives the same bytes (then the same failure, or more than the limit), for the path that
   * answers it exactly as it answers the original. `legacy` is how the SDK routes it: a body that is not JSON is
   * 2025-era traffic, the other two the modern path's errors.
   */
  | { readonly request: Request; readonly legacy: boolean };

const rebuilt = (request: Request, body: ReadableStream<Uint8Array>): Request =>
  new Request(request.url, {
    method: request.method,
    headers: request.headers,
    body,
    signal: request.signal,
    duplex: 'half',
  } as RequestInit);

/** A stream of `chunks`, then `error` (`undefined`: then its end). */
function replay(chunks: Uint8Array[], error?: unknown): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      if (error === undefined) controller.close();
      else controller.error(error);
    },
  });
}

/**
 * The body of a POST `request` whose `content-length` is at most `limit` bytes, read once (and never past `limit`
 * and one chunk); `undefined` for any other request (no length, a larger one, not a POST, no body), which is left
 * unread for the SDK to read as it does.
 */
export async function readPostBody(request: Request, limit: number): Promise<PostBody | undefined> {
  if (request.body === null || request.bodyUsed || request.method.toUpperCase() !== 'POST') return undefined;
  const declared = request.headers.get('content-length');
  if (declared === null || !(Number(declared) <= limit)) return undefined;
  let reader: ReadableStreamDefaultReader<Uint8Array>;
  try {
    reader = request.body.getReader();
  } catch {
    return undefined; // locked by someone else: left to the SDK, as before
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
      if (size > limit) {
        // More than it declared: what was read is enough for the SDK's 413 (or its 415, checked first).
        reader.cancel().catch(() => {});
        return { request: rebuilt(request, replay(chunks)), legacy: false };
      }
    }
  } catch (error) {
    return { request: rebuilt(request, replay(chunks, error ?? new Error('unreadable body'))), legacy: false };
  }
  // As the SDK's readRequestBody decodes it (UTF-8, a leading BOM dropped) before JSON.parse, chunk by chunk.
  const decoder = new TextDecoder();
  let text = '';
  for (const chunk of chunks) text += decoder.decode(chunk, { stream: true });
  text += decoder.decode();
  try {
    return { parsedBody: JSON.parse(text) as unknown };
  } catch {
    return { request: rebuilt(request, replay(chunks)), legacy: true };
  }
}
