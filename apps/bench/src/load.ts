/**
 * Loads one named export of a workspace package at run time. The codecs and stores are separate
 * packages built on their own; when one is missing (not built yet, or failing to load) its rows are
 * skipped with a printed reason instead of the whole bench failing to start.
 */
export type Loaded<T> = { ok: true; value: T } | { ok: false; reason: string };

export async function loadFunction<T extends (...args: never[]) => unknown>(specifier: string, name: string): Promise<Loaded<T>> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(specifier)) as Record<string, unknown>;
  } catch (error) {
    const message = error instanceof Error ? error.message.split('\n')[0] : String(error);
    return { ok: false, reason: `cannot import ${specifier} (${message}); build it with \`npx tsup\` in its folder` };
  }
  const value = mod[name];
  if (typeof value !== 'function') return { ok: false, reason: `${specifier} has no exported function ${name}` };
  return { ok: true, value: value as T };
}
