import type { Client } from '@modelcontextprotocol/client';
import { InputUnsupportedError } from './errors.js';
import type { Settings } from './options.js';
import { isObject, type Json, registeredHandler } from './sdk.js';

/**
 * The answers to what the server asks (`inputRequests`, of a round or of a task), keyed like the questions, asked
 * concurrently through `onInput` or the client's registered handlers. An entry that is not an embedded request, or
 * one nobody here can answer, is an {@link InputUnsupportedError}: nothing is sent back half-answered.
 */
export async function answer(client: Client, settings: Settings, requests: Json, signal: AbortSignal): Promise<Json> {
  const answers = await Promise.all(
    Object.entries(requests).map(async ([key, request]): Promise<[string, unknown]> => {
      const method = isObject(request) && typeof request.method === 'string' ? request.method : '';
      const params = isObject(request) && isObject(request.params) ? request.params : undefined;
      if (method === '') throw new InputUnsupportedError(method);
      if (settings.onInput !== undefined) return [key, await settings.onInput({ key, method, params }, { signal })];
      const handler = registeredHandler(client, method);
      if (handler === undefined) throw new InputUnsupportedError(method);
      return [key, await handler(key, params, signal)];
    }),
  );
  return Object.fromEntries(answers);
}
