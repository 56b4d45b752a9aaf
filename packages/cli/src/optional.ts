/**
 * The store drivers are optional peer dependencies of `@mrtr/cli` (`keygen`, `keys`, `inspect` and the memory
 * store need none of them), imported only by the command that uses them. A missing one is reported by name,
 * with the install line, instead of Node's bare "Cannot find package".
 */

/** What `doctor --store NAME` needs installed next to `@mrtr/cli`. */
export const STORE_PACKAGES = {
  redis: ['@mrtr/store-redis', 'ioredis'],
  postgres: ['@mrtr/store-sql', 'pg'],
  sqlite: ['@mrtr/store-sql', 'better-sqlite3'],
  upstash: ['@mrtr/store-upstash', '@upstash/redis'],
  dynamodb: ['@mrtr/store-dynamodb', '@aws-sdk/client-dynamodb'],
} as const;

/** A package a command needs is not installed (or cannot be found from `@mrtr/cli`). */
export class MissingPackageError extends Error {
  override name = 'MissingPackageError';
  /** The package that could not be found. */
  readonly missing: string;
  constructor(missing: string, packages: readonly string[], what: string) {
    super(
      `${what} needs ${packages.join(' and ')} installed next to @mrtr/cli, and ${missing} was not found: npm i -D ${packages.join(' ')}`,
    );
    this.missing = missing;
  }
}

const notFound = (error: unknown): string | undefined => {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return undefined;
  const message = error instanceof Error ? error.message : '';
  return /Cannot find (?:package|module) '((?:@[^/']+\/)?[^/']+)/.exec(message)?.[1];
};

/**
 * Runs `load` (a literal `import('…')`, so bundlers and type checks see the specifier); a module that cannot be
 * found, and is one of `packages`, becomes a {@link MissingPackageError}. Any other failure is rethrown.
 */
export async function loadOptional<T>(load: () => Promise<T>, packages: readonly string[], what: string): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const missing = notFound(error);
    if (missing !== undefined && packages.includes(missing)) throw new MissingPackageError(missing, packages, what);
    throw error;
  }
}
