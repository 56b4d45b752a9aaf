/** What {@link perIsolate} returns: the value built from the current setting (and, when built, from `context`). */
export type FromSetting<T, C = void> = (setting: string | undefined, context: C) => T;

/**
 * Builds something from one setting of a Worker's `env` (a secret such as `MRTR_KEYS`) once per isolate, and again
 * only when the setting's text changes: `const mrtrFor = perIsolate('MRTR_KEYS', (text, env: Env) => createMrtr(…))`,
 * then `mrtrFor(env.MRTR_KEYS, env)` in every request. A Worker's secrets reach it in `env`, not at module load, so
 * the key ring cannot be built at the top level; building it per request would derive every key again each time.
 * `context` (the `env` itself, say, for its bindings) is passed to `build` and otherwise ignored.
 *
 * Fails closed: a missing or blank setting is a `TypeError` naming it (never a random key that only this isolate
 * would know), and a `build` that throws is not cached (the next request tries again).
 */
export function perIsolate<T, C = void>(name: string, build: (setting: string, context: C) => T): FromSetting<T, C> {
  if (typeof name !== 'string' || name.length === 0) throw new TypeError('perIsolate: name must be a non-empty string');
  if (typeof build !== 'function') throw new TypeError('perIsolate: build must be a function');
  let built: { setting: string; value: T } | undefined;
  return (setting, context) => {
    if (typeof setting !== 'string' || setting.trim().length === 0) {
      throw new TypeError(`${name} is not set: add it as a secret (wrangler secret put ${name}), or to .dev.vars locally`);
    }
    if (built?.setting !== setting) built = { setting, value: build(setting, context) };
    return built.value;
  };
}
