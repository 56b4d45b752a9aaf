/** rollout: MRTR first, then a task that asks midway. */
import type { McpServer } from '@modelcontextprotocol/server';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import * as z from 'zod/v4';
import { type DemoDeps, text, taskSleep, ENVIRONMENT_SCHEMA, ROLLOUT_INSTANCES, SERVICE } from './shared.js';

export function registerRollout(server: McpServer, deps: DemoDeps): void {
  const { mrtr } = deps;
  // ---------------------------------------------------------------- rollout: MRTR first, then a task that asks midway
  const waveMs = deps.rolloutWaveMs ?? 1_500;
  mrtr.registerTool(
    server,
    'rollout',
    {
      title: 'Roll out a release',
      description:
        `Rolls a new release of a service out to its ${ROLLOUT_INSTANCES} instances in waves (simulated; runs for seconds, ` +
        'as a task: needs a client with the tasks extension). Asks for the environment first; in production it asks ' +
        'for approval after the canary, while the task runs. Cancel it at any time.',
      inputSchema: z.object({ service: SERVICE }),
      annotations: { destructiveHint: true },
      task: 'required',
      // The production approval is asked during the task: a client that cannot answer it is refused before the
      // environment round, not after the canary.
      taskInput: ['elicitation.form'],
    },
    async ({ service }, _ctx, need) => {
      const env = need.elicit('environment', {
        message: `Roll ${service} out where?`,
        requestedSchema: ENVIRONMENT_SCHEMA,
      });
      if (env === undefined) return need.ask();
      if (env.action !== 'accept') return need.fail(`Rollout of ${service} ${env.action === 'decline' ? 'declined' : 'cancelled'}.`);
      const environment = env.content.environment;
      return need.task(async (task) => {
        const release = base64urlEncode(randomBytes(4));
        const summary = (done: number) => ({ service, environment, release, instances: ROLLOUT_INSTANCES, updated: done });
        await task.status(`canary: release ${release} on 1 of ${ROLLOUT_INSTANCES} instances`);
        await taskSleep(waveMs, task.signal);
        if (environment === 'production') {
          const approval = await task.elicit('approve_rollout', {
            message: `The canary of ${service} (release ${release}) is healthy: error rate 0.1 %, p99 180 ms. Roll out to the other ${ROLLOUT_INSTANCES - 1} instances?`,
            requestedSchema: {
              type: 'object',
              properties: { approve: { type: 'boolean', title: `Roll ${release} out to all of ${service}` } },
              required: ['approve'],
            },
          });
          if (approval.action !== 'accept' || !approval.content.approve) {
            deps.effect?.('rollout', 1);
            return {
              ...text(`Rollout of ${service} ${release} halted after the canary: 1 of ${ROLLOUT_INSTANCES} instances on the new release.`),
              structuredContent: summary(1),
              isError: true,
            };
          }
        }
        const half = Math.ceil(ROLLOUT_INSTANCES / 2);
        await task.status(`wave 2: release ${release} on ${half} of ${ROLLOUT_INSTANCES} instances`);
        await taskSleep(waveMs, task.signal);
        await task.status(`wave 3: release ${release} on ${ROLLOUT_INSTANCES} of ${ROLLOUT_INSTANCES} instances`);
        await taskSleep(waveMs, task.signal);
        deps.effect?.('rollout', 1);
        return {
          ...text(`Rolled ${service} release ${release} out to ${environment}: ${ROLLOUT_INSTANCES} of ${ROLLOUT_INSTANCES} instances.`),
          structuredContent: summary(ROLLOUT_INSTANCES),
        };
      });
    },
  );
}
