// examples/tasks-client.ts (linked from docs/tasks-client.md) run as written: its client follows a task over real
// HTTP JSON-RPC, so the wire shapes the page documents stay true.
import { expect, it } from 'vitest';

// Imported by URL: the example is type-checked by tsconfig.node-http.json (node:http without exactOptionalPropertyTypes).
const example = new URL('../examples/tasks-client.ts', import.meta.url).href;
const { runExample } = (await import(example)) as { runExample: () => Promise<string[]> };

it('the tasks client example answers the round, follows the task, answers it with tasks/update and cancels another', async () => {
  expect(await runExample()).toEqual([
    'tools/call → input_required: confirm',
    'tools/call → task: working, poll every 100 ms',
    'tasks/get → input_required: elicitation/create "Canary healthy. Deploy the rest?"',
    'tasks/update → complete',
    'tasks/get → completed: Deployed prod',
    'tasks/cancel → complete',
    'tasks/get → cancelled',
  ]);
});
