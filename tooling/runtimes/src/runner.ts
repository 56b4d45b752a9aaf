/**
 * A tiny test runner for runtimes without vitest: collects `it(name, fn, timeout?)` calls, runs them one
 * after another (each bounded by its timeout), and reports `N passed, N failed`.
 */
export interface Collected {
  name: string;
  fn: () => Promise<void> | void;
  timeout: number;
}

export interface RunResult {
  passed: number;
  failed: number;
  failures: string[];
}

export function collector(): { it: (name: string, fn: () => Promise<void> | void, timeout?: number) => void; tests: Collected[] } {
  const tests: Collected[] = [];
  return { it: (name, fn, timeout = 120_000) => void tests.push({ name, fn, timeout }), tests };
}

export async function runTests(tests: readonly Collected[], log: (line: string) => void): Promise<RunResult> {
  const result: RunResult = { passed: 0, failed: 0, failures: [] };
  for (const test of tests) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        Promise.resolve().then(test.fn),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`timed out after ${test.timeout} ms`)), test.timeout);
        }),
      ]);
      result.passed++;
    } catch (error) {
      result.failed++;
      const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      result.failures.push(`${test.name}: ${message}`);
      log(`  FAIL ${test.name}: ${message}`);
    } finally {
      clearTimeout(timer);
    }
  }
  return result;
}
