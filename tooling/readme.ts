// Shared README checks for every package's tests: the Quick start block is the type-checked
// examples/quickstart.ts verbatim (so README code cannot drift from code that compiles), and the bench
// markers that apps/bench fills in are present.
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

export interface ReadmeCheckOptions {
  /** Longest allowed quick start, in lines. @default 15 */
  maxLines?: number;
  /** The README has the `<!-- bench:start -->`/`<!-- bench:end -->` markers. @default true */
  benchMarkers?: boolean;
  /** More sections whose first ts block must equal a (type-checked) file, e.g. `{ heading: 'Without the SDK', file: 'examples/guard.ts' }`. */
  blocks?: { heading: string; file: string }[];
}

/** Registers the README tests for the package whose `test/` folder holds `testFileUrl`. */
export function readmeChecks(testFileUrl: string, options: ReadmeCheckOptions = {}): void {
  const read = (path: string): string => readFileSync(new URL(path, testFileUrl), 'utf8');
  const maxLines = options.maxLines ?? 15;

  it(`the README quick start is examples/quickstart.ts, verbatim, and at most ${maxLines} lines`, () => {
    const example = read('../examples/quickstart.ts');
    const block = /## Quick start\n\n```ts\n([\s\S]*?)```/.exec(read('../README.md'))?.[1];
    expect(block).toBe(example);
    expect(example.trimEnd().split('\n').length).toBeLessThanOrEqual(maxLines);
  });

  for (const { heading, file } of options.blocks ?? []) {
    it(`the README section "${heading}" is ${file}, verbatim`, () => {
      const escaped = heading.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      const block = new RegExp(`## ${escaped}\\n[\\s\\S]*?\`\`\`ts\\n([\\s\\S]*?)\`\`\``).exec(read('../README.md'))?.[1];
      expect(block).toBe(read(`../${file}`));
    });
  }

  if (options.benchMarkers !== false) {
    it('the README has the bench markers the benchmark app fills in', () => {
      const readme = read('../README.md');
      expect(readme.indexOf('<!-- bench:start -->')).toBeGreaterThan(0);
      expect(readme.indexOf('<!-- bench:end -->')).toBeGreaterThan(readme.indexOf('<!-- bench:start -->'));
    });
  }
}
