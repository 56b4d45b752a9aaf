/** The `it`/`test` of vitest, jest or node:test: `(name, fn, timeoutMs?)`. */
export type TestFn = (name: string, fn: () => Promise<void> | void, timeout?: number) => void;
