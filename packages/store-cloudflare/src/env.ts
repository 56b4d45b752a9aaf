/** What {@link perIsolate} returns: the value built from the current setting. */
export type FromSetting<T> = (setting: string | undefined) => T;

/**
 * Builds something from one setting of a Worker's `env` (a secret such as `MRTR_KEYS`) once per isolate, and again
 * only when the setting's text changes: `const mrtrFor = perIsolate('MRTR_KEYS', (text) => createMrtr(…))`, then
 * `mrtrFor(env.MRTR_KEYS)` in every request. A Worker's secrets reach it in `env`, not at module load, so the key ring
 * cannot be built at the top level; building it per request would re-derive every key each time.
 *
 * Fails closed: a missing or empty setting is a `TypeError` naming it (never a random key that only this isolate
 * knows), and a `build` that throws is not cached (the next request tries again).
 */
export function perIsolate<T>(name: string, build: (setting: string) => T): FromSetting<T> {
  if (typeof name !== 'string' || name.length === 0) throw new TypeError('perIsolate: name must be a non-empty string');
  if (typeof build !== 'function') throw new TypeError('perIsolate: build must be a function');
  let built: { setting: string; value: T } | undefined;
  return (setting) => {
    if (typeof setting !== 'string' || setting.trim().length === 0) {
      throw new TypeError(`${name} is not set: add it as a secret (wrangler secret put ${name}) or in .dev.vars`);
    }
    if (built?.setting !== setting) built = { setting, value: build(setting) };
    return built.value;
  };
}
