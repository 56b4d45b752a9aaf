/**
 * `@mrtr/core/node`: key sources that need Node APIs (a file). Everything else of the key provider is in
 * `@mrtr/core` and runs on every runtime.
 */
import { type FSWatcher, watch } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import type { KeyProvider } from './keys/provider.js';
import { MAX_KEY_SET_CHARS } from './keys/sources.js';

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

/** How long the watcher waits after a change before reading, ms: one read for the burst a rotation writes. */
const WATCH_DEBOUNCE_MS = 25;

/**
 * Refreshes `provider` when the file at `path` changes (`fs.watch`, on top of the provider's timer, which stays the
 * safety net: some file systems report no changes). The watch follows the path, not the inode: it watches the file's
 * directory, so an atomic replacement (a temp file renamed over the key file, as `mrtr keys rotate --file` writes it)
 * is seen every time, and so is a Kubernetes secret update (its `..data` link swapped). Changes are debounced, then
 * the file is read again. Returns a function that stops watching (idempotent).
 */
export function watchKeyFile(provider: KeyProvider, path: string): () => void {
  if (typeof path !== 'string' || path === '') throw new TypeError('watchKeyFile: path must be a non-empty string');
  const name = basename(path);
  let timer: ReturnType<typeof setTimeout> | undefined;
  let dirty = false;
  let reading = false;
  let stopped = false;
  const read = async () => {
    reading = true;
    while (dirty && !stopped) {
      dirty = false;
      // A refresh already under way may have read the file before this change: settle it, then read again.
      await provider.refresh().catch(() => {});
      if (!stopped) await provider.refresh().catch(() => {});
    }
    reading = false;
  };
  const changed = (filename: string | Buffer | null) => {
    const changedName = filename?.toString();
    // `filename` may be missing on some platforms; `..data` & co. are the links a Kubernetes secret volume swaps.
    if (stopped || (changedName !== undefined && changedName !== name && !changedName.startsWith('..'))) return;
    dirty = true;
    if (timer !== undefined || reading) return;
    timer = setTimeout(() => {
      timer = undefined;
      void read();
    }, WATCH_DEBOUNCE_MS);
    (timer as { unref?: () => void }).unref?.();
  };
  let watcher: FSWatcher | undefined = watch(dirname(path), { persistent: false }, (_event, filename) => changed(filename));
  watcher.on('error', () => {});
  return () => {
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    watcher?.close();
    watcher = undefined;
  };
}
