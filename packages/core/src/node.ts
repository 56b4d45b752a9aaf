/**
 * `@mrtr/core/node`: key sources that need Node APIs (a file). Everything else of the key provider is in
 * `@mrtr/core` and runs on every runtime.
 */
import { type FSWatcher, watch } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import type { KeyProvider } from './key-provider.js';
import { MAX_KEY_SET_CHARS } from './key-sources.js';

/**
 * A `load` for `KeyProvider.create` that reads a key file (`MRTR_KEYS` format or a JWK Set, e.g. a mounted
 * Kubernetes secret or the file `mrtr keys rotate --file` writes). The file is re-read only when it changed (its
 * size, modification time or inode); otherwise the last text is returned. A file larger than 64 KiB is refused.
 */
export function fileKeySource(path: string): () => Promise<string> {
  if (typeof path !== 'string' || path === '') throw new TypeError('fileKeySource: path must be a non-empty string');
  let last: { stamp: string; text: string } | undefined;
  return async () => {
    const info = await stat(path);
    if (!info.isFile()) throw new TypeError(`fileKeySource: ${path} is not a file`);
    if (info.size > MAX_KEY_SET_CHARS * 4) throw new RangeError(`fileKeySource: ${path} is larger than a key set may be`);
    const stamp = `${info.ino}:${info.size}:${info.mtimeMs}`;
    if (last !== undefined && last.stamp === stamp) return last.text;
    const text = await readFile(path, 'utf8');
    last = { stamp, text };
    return text;
  };
}

/**
 * Refreshes `provider` when the file at `path` changes (`fs.watch`, on top of the provider's timer, which stays the
 * safety net: some file systems report no changes). Returns a function that stops watching.
 */
export function watchKeyFile(provider: KeyProvider, path: string): () => void {
  if (typeof path !== 'string' || path === '') throw new TypeError('watchKeyFile: path must be a non-empty string');
  let watcher: FSWatcher | undefined = watch(path, { persistent: false }, () => {
    provider.refresh().catch(() => {});
  });
  watcher.on('error', () => {});
  return () => {
    watcher?.close();
    watcher = undefined;
  };
}
